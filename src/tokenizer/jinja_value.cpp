#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace mvllm::jinja {

void fail(const std::string& message) { throw JinjaError(message); }

Value Value::undefined(std::string name) {
    Value v;
    v.s_ = std::move(name);
    return v;
}

Value Value::none() {
    Value v;
    v.kind_ = ValueKind::None;
    return v;
}

Value::Value(bool b) : kind_(ValueKind::Bool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t v) : kind_(ValueKind::Int), i_(v) {}
Value::Value(double v) : kind_(ValueKind::Float), f_(v) {}
Value::Value(std::string s) : kind_(ValueKind::String), s_(std::move(s)) {}

Value Value::list(std::vector<Value> items, bool is_tuple) {
    Value v;
    v.kind_ = ValueKind::List;
    auto data = std::make_shared<ListData>();
    data->items = std::move(items);
    data->is_tuple = is_tuple;
    v.ref_ = data;
    return v;
}

Value Value::dict() {
    Value v;
    v.kind_ = ValueKind::Dict;
    v.ref_ = std::make_shared<DictData>();
    return v;
}

Value Value::namespace_object() {
    Value v;
    v.kind_ = ValueKind::Namespace;
    v.ref_ = std::make_shared<DictData>();
    return v;
}

Value Value::callable(std::string name, NativeFn fn) {
    Value v;
    v.kind_ = ValueKind::Callable;
    v.ref_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn)});
    return v;
}

namespace {
// Deeper JSON (a hostile messages file) would exhaust the stack; tojson refuses the same depth.
constexpr int kMaxJsonDepth = 512;
}  // namespace

int64_t Value::float_to_int(double f) {
    // [-2^63, 2^63): the doubles a static_cast to int64_t is defined for.
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
        throw JinjaError("cannot convert float " + Value(f).repr() + " to an integer");
    return static_cast<int64_t>(f);
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

Value Value::from_json_at(const nlohmann::ordered_json& j, int depth) {
    if (depth > kMaxJsonDepth) fail("template variable nested too deeply (more than 512 levels)");
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
        uint64_t u = j.get<uint64_t>();
        if (u > uint64_t(INT64_MAX)) return Value(double(u));
        return Value(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        std::vector<Value> items;
        items.reserve(j.size());
        for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
        return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
        Value d = dict();
        for (const auto& [k, e] : j.items()) d.dict_data().entries.emplace_back(Value(k), from_json_at(e, depth + 1));
        return d;
    }
    default: return none();  // binary and discarded values do not occur in parsed JSON
    }
}

bool Value::is_tuple() const { return is_list() && static_cast<ListData*>(ref_.get())->is_tuple; }
std::vector<Value>& Value::items() const { return static_cast<ListData*>(ref_.get())->items; }
DictData& Value::dict_data() const { return *static_cast<DictData*>(ref_.get()); }
const CallableData& Value::callable_data() const { return *static_cast<CallableData*>(ref_.get()); }

bool Value::truthy() const {
    switch (kind_) {
    case ValueKind::Undefined:
    case ValueKind::None: return false;
    case ValueKind::Bool: return b_;
    case ValueKind::Int: return i_ != 0;
    case ValueKind::Float: return f_ != 0;
    case ValueKind::String: return !s_.empty();
    case ValueKind::List: return !items().empty();
    case ValueKind::Dict: return !dict_data().entries.empty();
    case ValueKind::Namespace:
    case ValueKind::Callable: return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (kind_) {
    case ValueKind::Undefined: return "Undefined";
    case ValueKind::None: return "NoneType";
    case ValueKind::Bool: return "bool";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::String: return "str";
    case ValueKind::List: return is_tuple() ? "tuple" : "list";
    case ValueKind::Dict: return "dict";
    case ValueKind::Namespace: return "Namespace";
    case ValueKind::Callable: return "function";
    }
    return "object";
}

std::string format_float(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // [-]d[.ddd]e[+-]XX, shortest round trip
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    int exp10 = std::stoi(sci.substr(e + 1));
    // Python repr: fixed notation for 1e-4 <= |v| < 1e16, else scientific.
    if (exp10 >= -4 && exp10 < 16) {
        std::string out;
        if (exp10 < 0) {
            out = "0." + std::string(size_t(-exp10 - 1), '0') + digits;
        } else if (size_t(exp10) + 1 >= digits.size()) {
            out = digits + std::string(size_t(exp10) + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, size_t(exp10) + 1) + "." + digits.substr(size_t(exp10) + 1);
        }
        return sign + out;
    }
    std::string out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return sign + out + exp_buf;
}

static std::string repr_string(const std::string& s) {
    bool has_single = s.find('\'') != std::string::npos;
    bool has_double = s.find('"') != std::string::npos;
    char quote = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == quote) out += std::string("\\") + char(c);
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else {
            out += char(c);
        }
    }
    out += quote;
    return out;
}

std::string Value::to_str() const {
    switch (kind_) {
    case ValueKind::Undefined: return "";
    case ValueKind::None: return "None";
    case ValueKind::Bool: return b_ ? "True" : "False";
    case ValueKind::Int: return std::to_string(i_);
    case ValueKind::Float: return format_float(f_);
    case ValueKind::String: return s_;
    default: return repr();
    }
}

std::string Value::repr() const {
    switch (kind_) {
    case ValueKind::String: return repr_string(s_);
    case ValueKind::List: {
        bool tuple = is_tuple();
        std::string out = tuple ? "(" : "[";
        const auto& v = items();
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            out += v[i].repr();
        }
        if (tuple && v.size() == 1) out += ",";
        out += tuple ? ")" : "]";
        return out;
    }
    case ValueKind::Dict: {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, e] : dict_data().entries) {
            if (!first) out += ", ";
            first = false;
            out += k.repr() + ": " + e.repr();
        }
        return out + "}";
    }
    case ValueKind::Namespace: return "<Namespace>";
    case ValueKind::Callable: return "<function " + callable_data().name + ">";
    default: return to_str();
    }
}

const Value* DictData::find(const Value& key) const {
    for (const auto& [k, v] : entries)
        if (values_equal(k, key)) return &v;
    return nullptr;
}

const Value* DictData::find(const std::string& key) const {
    for (const auto& [k, v] : entries)
        if (k.is_string() && k.str() == key) return &v;
    return nullptr;
}

void DictData::set(const Value& key, Value value) {
    for (auto& [k, v] : entries) {
        if (values_equal(k, key)) {
            v = std::move(value);
            return;
        }
    }
    entries.emplace_back(key, std::move(value));
}

bool values_equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
    case ValueKind::Undefined:
    case ValueKind::None: return true;
    case ValueKind::String: return a.str() == b.str();
    case ValueKind::List: {
        if (a.is_tuple() != b.is_tuple()) return false;
        const auto &x = a.items(), &y = b.items();
        if (x.size() != y.size()) return false;
        for (size_t i = 0; i < x.size(); ++i)
            if (!values_equal(x[i], y[i])) return false;
        return true;
    }
    case ValueKind::Dict: {
        const auto &x = a.dict_data(), &y = b.dict_data();
        if (x.entries.size() != y.entries.size()) return false;
        for (const auto& [k, v] : x.entries) {
            const Value* other = y.find(k);
            if (!other || !values_equal(v, *other)) return false;
        }
        return true;
    }
    default: return &a.dict_data() == &b.dict_data();  // identity for namespaces and callables
    }
}

bool value_less(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
        return a.as_int() < b.as_int();
    }
    if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (value_less(x[i], y[i])) return true;
            if (value_less(y[i], x[i])) return false;
        }
        return x.size() < y.size();
    }
    fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

static uint32_t decode_at(const std::string& s, size_t i, size_t* len);

static void dump_string(std::string& out, const std::string& s, bool ensure_ascii = false) {
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (ensure_ascii && c >= 0x80) {
            size_t len = 1;
            uint32_t cp = decode_at(s, i, &len);
            i += len - 1;
            char buf[16];
            if (cp >= 0x10000) {
                cp -= 0x10000;
                std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
            }
            out += buf;
            continue;
        }
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                out += buf;
            } else {
                out += char(c);
            }
        }
    }
    out += '"';
}

static void dump_value(std::string& out, const Value& v, const DumpOptions& o, int depth) {
    if (depth > 512) fail("tojson: structure nested too deeply");
    auto newline = [&](int level) {
        if (!o.has_indent) return;
        out += '\n';
        for (int i = 0; i < level; ++i) out += o.indent;
    };
    switch (v.kind()) {
    case ValueKind::None: out += "null"; return;
    case ValueKind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case ValueKind::Int: out += std::to_string(v.as_int()); return;
    case ValueKind::Float: {
        double f = v.as_float();
        if (std::isnan(f)) out += "NaN";
        else if (std::isinf(f)) out += f > 0 ? "Infinity" : "-Infinity";
        else out += format_float(f);
        return;
    }
    case ValueKind::String: dump_string(out, v.str(), o.ensure_ascii); return;
    case ValueKind::List: {
        const auto& items = v.items();
        if (items.empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out += o.item_separator;
            newline(depth + 1);
            dump_value(out, items[i], o, depth + 1);
        }
        newline(depth);
        out += ']';
        return;
    }
    case ValueKind::Dict: {
        std::vector<const std::pair<Value, Value>*> entries;
        for (const auto& e : v.dict_data().entries) entries.push_back(&e);
        if (entries.empty()) {
            out += "{}";
            return;
        }
        if (o.sort_keys)
            std::stable_sort(entries.begin(), entries.end(),
                             [](auto* a, auto* b) { return value_less(a->first, b->first); });
        out += '{';
        bool first = true;
        for (const auto* e : entries) {
            if (!first) out += o.item_separator;
            first = false;
            newline(depth + 1);
            const Value& k = e->first;
            if (k.is_string()) dump_string(out, k.str(), o.ensure_ascii);
            else if (k.is_bool()) dump_string(out, k.as_bool() ? "true" : "false");
            else if (k.is_none()) dump_string(out, "null");
            else if (k.is_int() || k.is_float()) dump_string(out, k.to_str());
            else fail("keys must be str, int, float, bool or None, not " + k.type_name());
            out += o.key_separator;
            dump_value(out, e->second, o, depth + 1);
        }
        newline(depth);
        out += '}';
        return;
    }
    default: fail("Object of type " + v.type_name() + " is not JSON serializable");
    }
}

std::string dump_json(const Value& v, const DumpOptions& options) {
    std::string out;
    dump_value(out, v, options, 0);
    return out;
}

std::vector<size_t> code_point_offsets(const std::string& s) {
    std::vector<size_t> offsets;
    offsets.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
    return offsets;
}

size_t code_point_count(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

static uint32_t decode_at(const std::string& s, size_t i, size_t* len) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    *len = size_t(n);
    return cp;
}

static bool is_py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars) {
    std::vector<uint32_t> set;
    if (chars) {
        for (size_t i = 0, len = 0; i < chars->size(); i += len) set.push_back(decode_at(*chars, i, &len));
    }
    auto strip_it = [&](uint32_t cp) {
        return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_py_space(cp);
    };
    std::vector<std::pair<size_t, size_t>> cps;  // (offset, length)
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        decode_at(s, i, &len);
        cps.emplace_back(i, len);
    }
    size_t begin = 0, end = cps.size();
    if (left)
        while (begin < end && strip_it(decode_at(s, cps[begin].first, &cps[begin].second))) ++begin;
    if (right)
        while (end > begin && strip_it(decode_at(s, cps[end - 1].first, &cps[end - 1].second))) --end;
    if (begin == end) return {};
    size_t from = cps[begin].first, to = cps[end - 1].first + cps[end - 1].second;
    return s.substr(from, to - from);
}

}  // namespace mvllm::jinja
