// Methods of Python str that chat templates call: strip / lstrip / rstrip, startswith / endswith,
// split / rsplit / splitlines, lower / upper / title / capitalize, replace, find / count, join,
// format, and the is* predicates. Case mapping is ASCII only (non-ASCII letters are kept).
#include <cctype>

#include "tokenizer/jinja_builtins.h"

namespace mvllm::jinja {
namespace {

const Value& arg_or(std::vector<Value>& args, Kwargs& kwargs, size_t i, const char* name, const Value& fallback) {
    if (i < args.size()) return args[i];
    for (const auto& [k, v] : kwargs)
        if (k == name) return v;
    return fallback;
}

const std::string& need_string(const Value& v, const char* what) {
    if (!v.is_string()) fail(std::string(what) + " must be str, not " + v.type_name());
    return v.str();
}

std::string ascii_lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string ascii_upper(std::string s) {
    for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

bool is_space_byte(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

// Python str.split(None, maxsplit): runs of whitespace, no empty parts.
std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit) {
    std::vector<std::string> parts;
    size_t i = 0, n = s.size();
    while (true) {
        while (i < n && is_space_byte(s[i])) ++i;
        if (i >= n) break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
            size_t end = n;
            while (end > i && is_space_byte(s[end - 1])) --end;
            parts.push_back(s.substr(i, end - i));
            break;
        }
        size_t j = i;
        while (j < n && !is_space_byte(s[j])) ++j;
        parts.push_back(s.substr(i, j - i));
        i = j;
    }
    return parts;
}

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit) {
    if (sep.empty()) fail("empty separator");
    std::vector<std::string> parts;
    size_t start = 0;
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
        size_t p = s.find(sep, start);
        if (p == std::string::npos) break;
        parts.push_back(s.substr(start, p - start));
        start = p + sep.size();
    }
    parts.push_back(s.substr(start));
    return parts;
}

std::vector<std::string> rsplit_sep(const std::string& s, const std::string& sep, int64_t maxsplit) {
    if (sep.empty()) fail("empty separator");
    std::vector<std::string> parts;
    size_t end = s.size();
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
        if (end < sep.size()) break;
        size_t p = s.rfind(sep, end - sep.size());
        if (p == std::string::npos) break;
        parts.insert(parts.begin(), s.substr(p + sep.size(), end - p - sep.size()));
        end = p;
    }
    parts.insert(parts.begin(), s.substr(0, end));
    return parts;
}

Value string_list(const std::vector<std::string>& parts) {
    std::vector<Value> items;
    items.reserve(parts.size());
    for (const auto& p : parts) items.emplace_back(p);
    return Value::list(std::move(items));
}

std::string python_title(const std::string& s) {
    std::string out = s;
    bool previous_cased = false;
    for (char& c : out) {
        unsigned char u = static_cast<unsigned char>(c);
        if (std::isalpha(u)) {
            c = char(previous_cased ? std::tolower(u) : std::toupper(u));
            previous_cased = true;
        } else {
            previous_cased = false;
        }
    }
    return out;
}

std::string python_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
    std::string out;
    if (old.empty()) {
        auto offsets = code_point_offsets(s);
        int64_t done = 0;
        for (size_t i = 0; i <= offsets.size(); ++i) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            if (i < offsets.size()) {
                size_t end = i + 1 < offsets.size() ? offsets[i + 1] : s.size();
                out += s.substr(offsets[i], end - offsets[i]);
            }
        }
        return out;
    }
    size_t start = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t p = s.find(old, start);
        if (p == std::string::npos) break;
        out.append(s, start, p - start);
        out += repl;
        start = p + old.size();
        ++done;
    }
    out.append(s, start, std::string::npos);
    return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
    auto one = [&](const std::string& a) {
        if (a.size() > s.size()) return false;
        return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
    };
    if (affix.is_list() && affix.is_tuple()) {
        for (const auto& a : affix.items())
            if (one(need_string(a, "tuple for startswith/endswith"))) return true;
        return false;
    }
    return one(need_string(affix, prefix ? "startswith first arg" : "endswith first arg"));
}

std::string python_format(const std::string& fmt, std::vector<Value>& args, Kwargs& kwargs) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        char c = fmt[i];
        if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            size_t close = fmt.find('}', i);
            if (close == std::string::npos) fail("Single '{' encountered in format string");
            std::string field = fmt.substr(i + 1, close - i - 1);
            if (field.find_first_of(":!.[") != std::string::npos) fail("format specs in str.format are not supported");
            const Value* v = nullptr;
            if (field.empty()) {
                if (auto_index >= args.size()) fail("Replacement index " + std::to_string(auto_index) + " out of range");
                v = &args[auto_index++];
            } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
                size_t index = std::stoul(field);
                if (index >= args.size()) fail("Replacement index " + field + " out of range");
                v = &args[index];
            } else {
                for (const auto& [k, kv] : kwargs)
                    if (k == field) v = &kv;
                if (!v) fail("KeyError: '" + field + "'");
            }
            out += v->to_str();
            i = close;
        } else if (c == '}') {
            fail("Single '}' encountered in format string");
        } else {
            out += c;
        }
    }
    return out;
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
    if (s.empty()) return false;
    for (unsigned char c : s)
        if (!pred(c)) return false;
    return true;
}

}  // namespace

Value string_method(const Value& self, const std::string& name) {
    static const char* const names[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit",
                                        "splitlines", "lower", "upper", "title", "capitalize", "replace", "find",
                                        "rfind", "count", "join", "format", "isdigit", "isalpha", "isalnum",
                                        "isspace", "islower", "isupper", "swapcase", "casefold"};
    bool known = false;
    for (const char* n : names) known = known || name == n;
    if (!known) return Value::undefined("'str object' has no attribute '" + name + "'");
    std::string s = self.str();
    return Value::callable("str." + name, [s, name](Evaluator& ev, std::vector<Value>& args, Kwargs& kwargs) -> Value {
        static const Value none = Value::none();
        if (name == "strip" || name == "lstrip" || name == "rstrip") {
            const Value& chars = arg_or(args, kwargs, 0, "chars", none);
            std::string set;
            if (!chars.is_none()) set = need_string(chars, "strip arg");
            return Value(py_strip(s, name != "rstrip", name != "lstrip", chars.is_none() ? nullptr : &set));
        }
        if (name == "startswith" || name == "endswith") {
            if (args.empty()) fail(name + "() takes at least 1 argument (0 given)");
            std::string sub = s;
            if (args.size() > 1) {  // start index, in code points
                auto offsets = code_point_offsets(s);
                int64_t start = args[1].as_int();
                if (start < 0) start = std::max<int64_t>(0, start + int64_t(offsets.size()));
                sub = size_t(start) >= offsets.size() ? std::string() : s.substr(offsets[size_t(start)]);
            }
            return Value(affix_match(sub, args[0], name == "startswith"));
        }
        if (name == "split" || name == "rsplit") {
            const Value& sep = arg_or(args, kwargs, 0, "sep", none);
            const Value max = arg_or(args, kwargs, 1, "maxsplit", Value(int64_t(-1)));  // a copy: the default is a temporary
            int64_t maxsplit = max.as_int();
            if (sep.is_none()) {
                if (name == "rsplit" && maxsplit >= 0) fail("rsplit(None, maxsplit) is not supported");
                return string_list(split_whitespace(s, maxsplit));
            }
            const std::string& sep_str = need_string(sep, "separator");
            return string_list(name == "split" ? split_sep(s, sep_str, maxsplit) : rsplit_sep(s, sep_str, maxsplit));
        }
        if (name == "splitlines") {
            std::vector<std::string> lines;
            size_t start = 0;
            for (size_t i = 0; i < s.size(); ++i) {
                if (s[i] == '\n' || s[i] == '\r') {
                    lines.push_back(s.substr(start, i - start));
                    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
                    start = i + 1;
                }
            }
            if (start < s.size()) lines.push_back(s.substr(start));
            return string_list(lines);
        }
        if (name == "lower" || name == "casefold") return Value(ascii_lower(s));
        if (name == "upper") return Value(ascii_upper(s));
        if (name == "title") return Value(python_title(s));
        if (name == "capitalize") {
            std::string out = ascii_lower(s);
            if (!out.empty()) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
            return Value(out);
        }
        if (name == "swapcase") {
            std::string out = s;
            for (char& c : out) {
                unsigned char u = static_cast<unsigned char>(c);
                c = char(std::isupper(u) ? std::tolower(u) : std::toupper(u));
            }
            return Value(out);
        }
        if (name == "replace") {
            if (args.size() < 2) fail("replace() takes at least 2 arguments");
            int64_t count = args.size() > 2 ? args[2].as_int() : -1;
            std::string out = python_replace(s, need_string(args[0], "replace arg 1"), need_string(args[1], "replace arg 2"), count);
            ev.check_size(out.size());
            return Value(std::move(out));
        }
        if (name == "find" || name == "rfind" || name == "count") {
            if (args.empty()) fail(name + "() takes at least 1 argument (0 given)");
            const std::string& sub = need_string(args[0], name.c_str());
            if (name == "count") {
                if (sub.empty()) return Value(int64_t(code_point_count(s) + 1));
                int64_t n = 0;
                for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
                return Value(n);
            }
            size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
            if (p == std::string::npos) return Value(int64_t(-1));
            return Value(int64_t(code_point_count(s.substr(0, p))));
        }
        if (name == "join") {
            if (args.empty()) fail("join() takes exactly one argument (0 given)");
            std::string out;
            bool first = true;
            for (const Value& item : iterate(args[0])) {
                if (!first) out += s;
                first = false;
                out += need_string(item, "sequence item");
                ev.check_size(out.size());
            }
            return Value(std::move(out));
        }
        if (name == "format") return Value(python_format(s, args, kwargs));
        if (name == "isdigit") return Value(all_chars(s, [](unsigned char c) { return std::isdigit(c) != 0; }));
        if (name == "isalpha") return Value(all_chars(s, [](unsigned char c) { return std::isalpha(c) != 0; }));
        if (name == "isalnum") return Value(all_chars(s, [](unsigned char c) { return std::isalnum(c) != 0; }));
        if (name == "isspace") return Value(all_chars(s, [](unsigned char c) { return is_space_byte(char(c)); }));
        bool has_cased = false, has_lower = false, has_upper = false;
        for (unsigned char c : s) {
            has_lower = has_lower || std::islower(c);
            has_upper = has_upper || std::isupper(c);
            has_cased = has_cased || std::isalpha(c);
        }
        if (name == "islower") return Value(has_cased && !has_upper);
        return Value(has_cased && !has_lower);  // isupper
    });
}

}  // namespace mvllm::jinja
