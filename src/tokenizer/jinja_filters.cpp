// Filters (x | name(args)), following jinja2's definitions; tojson is Hugging Face's override.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/jinja_builtins.h"

namespace mvllm::jinja {
namespace {

class Args {
public:
    Args(std::vector<Value>& args, Kwargs& kwargs) : args_(args), kwargs_(kwargs) {}
    // The argument at position i (after the operand) or named `name`, else `fallback`.
    Value get(size_t i, const char* name, Value fallback = Value()) const {
        if (i < args_.size()) return args_[i];
        for (const auto& [k, v] : kwargs_)
            if (k == name) return v;
        return fallback;
    }
    size_t n_positional() const { return args_.size(); }
    std::vector<Value> rest(size_t from) const {
        return from < args_.size() ? std::vector<Value>(args_.begin() + long(from), args_.end()) : std::vector<Value>();
    }

private:
    std::vector<Value>& args_;
    Kwargs& kwargs_;
};

std::string ascii_case(std::string s, bool upper) {
    for (char& c : s) c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Python's int(str) / float(str): optional surrounding whitespace, sign, digits with '_'.
bool parse_python_int(const std::string& text, int64_t* out) {
    std::string s = py_strip(text, true, true);
    size_t i = 0;
    bool negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    int64_t v = 0;
    for (; i < s.size(); ++i) {
        char c = s[i];
        if (c == '_' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) && i > 0 &&
            std::isdigit(static_cast<unsigned char>(s[i - 1])))
            continue;
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v)) return false;
    }
    *out = negative ? -v : v;
    return true;
}

bool parse_python_float(const std::string& text, double* out) {
    std::string s = py_strip(text, true, true);
    if (s.empty()) return false;
    std::string lower = ascii_case(s, false);
    size_t sign = (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
    std::string body = lower.substr(sign);
    if (body == "inf" || body == "infinity" || body == "nan") {
        double v = body == "nan" ? NAN : INFINITY;
        *out = lower[0] == '-' ? -v : v;
        return true;
    }
    for (char c : body)
        if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != '+' && c != '-') return false;
    char* end = nullptr;
    *out = std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size();
}

// jinja2's attribute getter for map / selectattr / sort: "a.b.0" looks up item by item.
Value lookup_path(const Value& v, const std::string& path) {
    Value cur = v;
    size_t start = 0;
    while (true) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
        cur = digits ? get_item(cur, Value(int64_t(std::stoll(part)))) : get_item(cur, Value(part));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

Value do_tojson(const Value& v, const Args& a) {
    // Hugging Face: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    DumpOptions o;
    o.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
    Value indent = a.get(1, "indent", Value::none());
    if (indent.is_int() || indent.is_bool()) {
        o.has_indent = true;
        o.indent = std::string(size_t(std::max<int64_t>(0, indent.as_int())), ' ');
    } else if (indent.is_string()) {
        o.has_indent = true;
        o.indent = indent.str();
    } else if (!indent.is_none()) {
        fail("tojson: indent must be an integer or a string");
    }
    if (o.has_indent) o.item_separator = ",";
    Value separators = a.get(2, "separators", Value::none());
    if (!separators.is_none()) {
        if (!separators.is_list() || separators.items().size() != 2 || !separators.items()[0].is_string() ||
            !separators.items()[1].is_string())
            fail("tojson: separators must be a pair of strings");
        o.item_separator = separators.items()[0].str();
        o.key_separator = separators.items()[1].str();
    }
    o.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
    return Value(dump_json(v, o));
}

Value do_round(const Value& v, const Args& a) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) fail("type " + v.type_name() + " doesn't define __round__ method");
    int64_t precision = a.get(0, "precision", Value(int64_t(0))).as_int();
    std::string method = a.get(1, "method", Value("common")).to_str();
    if (method != "common" && method != "ceil" && method != "floor")
        fail("method must be common, ceil or floor");
    if (method == "common") {
        if (!v.is_float()) return Value(v.as_int());  // round(int, n) stays an int
        if (precision < 0 || precision > 300) fail("round: precision out of the supported range");
        char buf[400];
        std::snprintf(buf, sizeof(buf), "%.*f", int(precision), v.as_float());  // exact, ties to even
        return Value(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, double(precision));
    double x = v.as_float() * scale;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value do_indent(const Value& v, const Args& a) {
    Value width = a.get(0, "width", Value(int64_t(4)));
    std::string indention = width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
    bool first = a.get(1, "first", Value(false)).truthy();
    bool blank = a.get(2, "blank", Value(false)).truthy();
    std::string s = v.to_str() + "\n";
    std::vector<std::string> lines;  // str.splitlines() over \n, \r\n, \r
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
            lines.push_back(s.substr(start, i - start));
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
            start = i + 1;
        }
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    std::string rv;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) {
            rv += "\n";
            if (blank || !lines[i].empty()) rv += indention;
        }
        rv += lines[i];
    }
    if (first) rv = indention + rv;
    return Value(rv);
}

// The items kept by select / reject / selectattr / rejectattr.
Value do_select(Evaluator& ev, const Value& seq, const Args& a, bool by_attribute, bool keep_if) {
    std::string attribute;
    size_t next = 0;
    if (by_attribute) {
        Value attr = a.get(0, "attribute");
        if (!attr.is_string()) fail("selectattr/rejectattr need an attribute name");
        attribute = attr.str();
        next = 1;
    }
    Value test = a.get(next, "test", Value::none());
    std::vector<Value> test_args = a.rest(next + 1);
    if (!test.is_none() && !test.is_string()) fail("the test name must be a string");
    if (test.is_string() && !has_test(test.str())) fail("no test named '" + test.str() + "'");
    std::vector<Value> out;
    for (const Value& item : iterate(seq)) {
        Value subject = by_attribute ? lookup_path(item, attribute) : item;
        bool passed;
        if (test.is_none()) {
            passed = subject.truthy();
        } else {
            Kwargs none;
            std::vector<Value> args = test_args;
            passed = apply_test(ev, test.str(), subject, args, none);
        }
        if (passed == keep_if) out.push_back(item);
    }
    return Value::list(std::move(out));
}

std::vector<Value> sorted_values(std::vector<Value> items, bool case_sensitive, const std::string& attribute) {
    auto key = [&](const Value& v) {
        Value k = attribute.empty() ? v : lookup_path(v, attribute);
        if (!case_sensitive && k.is_string()) return Value(ascii_case(k.str(), false));
        return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return value_less(key(x), key(y)); });
    return items;
}

const char* const kFilters[] = {"trim", "upper", "lower", "capitalize", "title", "length", "count", "default", "d",
                                "join", "first", "last", "tojson", "string", "int", "float", "list", "items",
                                "reverse", "replace", "map", "select", "reject", "selectattr", "rejectattr", "unique",
                                "abs", "round", "safe", "escape", "e", "indent", "batch", "sort", "sum", "min", "max",
                                "attr", "wordcount", "center", "dictsort", "bool"};

}  // namespace

bool has_filter(const std::string& name) {
    for (const char* f : kFilters)
        if (name == f) return true;
    return false;
}

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, std::vector<Value>& args, Kwargs& kwargs) {
    Args a(args, kwargs);
    if (name == "trim") {
        Value chars = a.get(0, "chars", Value::none());
        std::string set = chars.is_none() ? std::string() : chars.to_str();
        return Value(py_strip(v.to_str(), true, true, chars.is_none() ? nullptr : &set));
    }
    if (name == "upper" || name == "lower") return Value(ascii_case(v.to_str(), name == "upper"));
    if (name == "capitalize") {
        std::string s = ascii_case(v.to_str(), false);
        if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
        return Value(s);
    }
    if (name == "title") {  // jinja2: words begin after whitespace or - ( { [ <
        std::string s = v.to_str();
        bool at_start = true;
        for (char& c : s) {
            unsigned char u = static_cast<unsigned char>(c);
            bool boundary = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            if (boundary) {
                at_start = true;
                continue;
            }
            c = char(at_start ? std::toupper(u) : std::tolower(u));
            at_start = false;
        }
        return Value(s);
    }
    if (name == "length" || name == "count") {
        switch (v.kind()) {
        case ValueKind::Undefined: return Value(int64_t(0));
        case ValueKind::String: return Value(int64_t(code_point_count(v.str())));
        case ValueKind::List: return Value(int64_t(v.items().size()));
        case ValueKind::Dict: return Value(int64_t(v.dict_data().entries.size()));
        default: fail("object of type '" + v.type_name() + "' has no len()");
        }
    }
    if (name == "default" || name == "d") {
        Value fallback = a.get(0, "default_value", Value(std::string()));
        bool boolean = a.get(1, "boolean", Value(false)).truthy();
        if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
        return v;
    }
    if (name == "join") {
        std::string sep = a.get(0, "d", Value(std::string())).to_str();
        Value attribute = a.get(1, "attribute", Value::none());
        std::string out;
        bool first = true;
        for (const Value& item : iterate(v)) {
            if (!first) out += sep;
            first = false;
            out += (attribute.is_none() ? item : lookup_path(item, attribute.to_str())).to_str();
            ev.check_size(out.size());
        }
        return Value(out);
    }
    if (name == "first" || name == "last") {
        std::vector<Value> items = iterate(v);
        if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "tojson") return do_tojson(v, a);
    if (name == "string") return Value(v.to_str());
    if (name == "bool") return Value(v.truthy());
    if (name == "int") {
        Value fallback = a.get(0, "default", Value(int64_t(0)));
        if (v.is_int() || v.is_bool()) return Value(v.as_int());
        if (v.is_float()) {
            double f = v.as_float();
            if (std::isnan(f) || std::isinf(f) || std::fabs(f) >= 9.2e18) return fallback;
            return Value(int64_t(f));
        }
        if (v.is_string()) {
            int64_t i;
            if (parse_python_int(v.str(), &i)) return Value(i);
            double f;
            if (parse_python_float(v.str(), &f) && !std::isnan(f) && !std::isinf(f) && std::fabs(f) < 9.2e18)
                return Value(int64_t(f));
        }
        return fallback;
    }
    if (name == "float") {
        Value fallback = a.get(0, "default", Value(0.0));
        if (v.is_number()) return Value(v.as_float());
        double f;
        if (v.is_string() && parse_python_float(v.str(), &f)) return Value(f);
        return fallback;
    }
    if (name == "list") return Value::list(iterate(v));
    if (name == "items") {
        if (v.is_undefined()) return Value::list();
        if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
        std::vector<Value> out;
        for (const auto& [k, e] : v.dict_data().entries) out.push_back(Value::list({k, e}, true));
        return Value::list(std::move(out));
    }
    if (name == "reverse") {
        if (v.is_string()) return get_slice(v, Value::none(), Value::none(), Value(int64_t(-1)));
        std::vector<Value> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::list(std::move(items));
    }
    if (name == "replace") {
        Value old = a.get(0, "old"), repl = a.get(1, "new"), count = a.get(2, "count", Value::none());
        std::string s = v.to_str(), from = old.to_str(), to = repl.to_str();
        Value method = string_method(Value(s), "replace");
        std::vector<Value> call_args = {Value(from), Value(to)};
        if (!count.is_none()) call_args.push_back(count);
        Kwargs none;
        return ev.call(method, call_args, none);
    }
    if (name == "map") {
        std::vector<Value> out;
        Value attribute = a.get(99, "attribute", Value::none());
        if (!attribute.is_none()) {
            Value fallback = a.get(99, "default");
            for (const Value& item : iterate(v)) {
                Value r = lookup_path(item, attribute.to_str());
                out.push_back(r.is_undefined() && !fallback.is_undefined() ? fallback : r);
            }
            return Value::list(std::move(out));
        }
        if (a.n_positional() == 0 || !args[0].is_string()) fail("map requires a filter name or attribute=");
        std::string filter = args[0].str();
        if (!has_filter(filter)) fail("no filter named '" + filter + "'");
        for (const Value& item : iterate(v)) {
            std::vector<Value> filter_args = a.rest(1);
            Kwargs filter_kwargs;
            out.push_back(apply_filter(ev, filter, item, filter_args, filter_kwargs));
        }
        return Value::list(std::move(out));
    }
    if (name == "select" || name == "reject") return do_select(ev, v, a, false, name == "select");
    if (name == "selectattr" || name == "rejectattr") return do_select(ev, v, a, true, name == "selectattr");
    if (name == "unique") {
        bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
        Value attribute = a.get(1, "attribute", Value::none());
        std::vector<Value> out, seen;
        for (const Value& item : iterate(v)) {
            Value key = attribute.is_none() ? item : lookup_path(item, attribute.to_str());
            if (!case_sensitive && key.is_string()) key = Value(ascii_case(key.str(), false));
            bool dup = false;
            for (const auto& s : seen) dup = dup || values_equal(s, key);
            if (!dup) {
                seen.push_back(key);
                out.push_back(item);
            }
        }
        return Value::list(std::move(out));
    }
    if (name == "abs") {
        if (v.is_undefined()) fail_undefined(v);
        if (v.is_float()) return Value(std::fabs(v.as_float()));
        if (!v.is_number()) fail("bad operand type for abs(): '" + v.type_name() + "'");
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (name == "round") return do_round(v, a);
    if (name == "safe") return v;
    if (name == "escape" || name == "e") {
        std::string out;
        for (char c : v.to_str()) {
            switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
            }
        }
        return Value(out);
    }
    if (name == "indent") return do_indent(v, a);
    if (name == "batch") {
        int64_t size = a.get(0, "linecount", Value(int64_t(1))).as_int();
        if (size <= 0) fail("batch size must be positive");
        Value fill = a.get(1, "fill_with", Value::none());
        std::vector<Value> out, current;
        for (const Value& item : iterate(v)) {
            current.push_back(item);
            if (int64_t(current.size()) == size) {
                out.push_back(Value::list(std::move(current)));
                current.clear();
            }
        }
        if (!current.empty()) {
            if (!fill.is_none())
                while (int64_t(current.size()) < size) current.push_back(fill);
            out.push_back(Value::list(std::move(current)));
        }
        return Value::list(std::move(out));
    }
    if (name == "sort") {
        bool reverse = a.get(0, "reverse", Value(false)).truthy();
        bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
        Value attribute = a.get(2, "attribute", Value::none());
        auto items = sorted_values(iterate(v), case_sensitive, attribute.is_none() ? "" : attribute.to_str());
        if (reverse) std::reverse(items.begin(), items.end());
        return Value::list(std::move(items));
    }
    if (name == "dictsort") {
        if (!v.is_dict()) fail("dictsort expects a mapping");
        bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
        std::string by = a.get(1, "by", Value("key")).to_str();
        bool reverse = a.get(2, "reverse", Value(false)).truthy();
        std::vector<Value> pairs;
        for (const auto& [k, e] : v.dict_data().entries) pairs.push_back(Value::list({k, e}, true));
        auto items = sorted_values(pairs, case_sensitive, by == "value" ? "1" : "0");
        if (reverse) std::reverse(items.begin(), items.end());
        return Value::list(std::move(items));
    }
    if (name == "sum") {
        Value attribute = a.get(0, "attribute", Value::none());
        Value total = a.get(1, "start", Value(int64_t(0)));
        for (const Value& item : iterate(v)) {
            Value x = attribute.is_none() ? item : lookup_path(item, attribute.to_str());
            if (!x.is_number() || !total.is_number()) fail("unsupported operand type(s) for +: '" + total.type_name() + "' and '" + x.type_name() + "'");
            total = (x.is_float() || total.is_float()) ? Value(total.as_float() + x.as_float()) : Value(total.as_int() + x.as_int());
        }
        return total;
    }
    if (name == "min" || name == "max") {
        bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
        Value attribute = a.get(1, "attribute", Value::none());
        auto items = sorted_values(iterate(v), case_sensitive, attribute.is_none() ? "" : attribute.to_str());
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        return name == "min" ? items.front() : items.back();
    }
    if (name == "attr") return get_attr(v, a.get(0, "name").to_str());
    if (name == "wordcount") {
        int64_t n = 0;
        bool in_word = false;
        for (unsigned char c : v.to_str()) {
            bool word = std::isalnum(c) || c == '_' || c >= 0x80;
            if (word && !in_word) ++n;
            in_word = word;
        }
        return Value(n);
    }
    if (name == "center") {
        std::string s = v.to_str();
        int64_t width = a.get(0, "width", Value(int64_t(80))).as_int();
        int64_t len = int64_t(code_point_count(s));
        if (width <= len) return Value(s);
        ev.check_size(size_t(width));
        int64_t total = width - len, left = total / 2 + (total & width & 1);
        return Value(std::string(size_t(left), ' ') + s + std::string(size_t(total - left), ' '));
    }
    fail("no filter named '" + name + "'");
}

}  // namespace mvllm::jinja
