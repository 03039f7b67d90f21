#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "tokenizer/jinja_value.h"

namespace mvllm::jinja {
namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_source(const std::string& source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            out += source[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

class Lexer {
public:
    explicit Lexer(std::string source) : src_(std::move(source)) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i)
            if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        size_t pos = 0;
        bool line_starting = true;
        while (pos < src_.size()) {
            size_t start = find_tag(pos);
            std::string text = src_.substr(pos, (start == std::string::npos ? src_.size() : start) - pos);
            if (start == std::string::npos) {
                emit_text(std::move(text), pos);
                break;
            }
            char kind = src_[start + 1];  // '{', '%' or '#'
            char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
            if (sign != '-' && sign != '+') sign = 0;
            if (sign == '-') {
                text = py_strip(text, false, true);
            } else if (sign != '+' && kind != '{') {
                size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
                if ((l_pos > 0 || line_starting) &&
                    std::all_of(text.begin() + long(l_pos), text.end(), is_ascii_space))
                    text.resize(l_pos);
            }
            emit_text(std::move(text), pos);
            size_t p = start + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                pos = lex_comment(start, p);
            } else if (kind == '%' && is_raw(p)) {
                pos = lex_raw(start, p);
            } else {
                pos = lex_tag(start, p, kind == '%');
            }
            line_starting = pos > 0 && src_[pos - 1] == '\n';
        }
        tokens_.push_back(Token{TokenType::Eof, "", line_of(src_.size()), column_of(src_.size())});
        return std::move(tokens_);
    }

private:
    int line_of(size_t pos) const {
        return int(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - line_starts_.begin());
    }
    int column_of(size_t pos) const { return int(pos - line_starts_[size_t(line_of(pos) - 1)]) + 1; }

    [[noreturn]] void error(const std::string& message, size_t pos) const {
        throw JinjaError(message, line_of(pos), column_of(pos));
    }

    void push(TokenType type, std::string value, size_t pos) {
        tokens_.push_back(Token{type, std::move(value), line_of(pos), column_of(pos)});
    }

    void emit_text(std::string text, size_t pos) {
        if (!text.empty()) push(TokenType::Text, std::move(text), pos);
    }

    size_t find_tag(size_t pos) const {
        while (true) {
            size_t p = src_.find('{', pos);
            if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
            char c = src_[p + 1];
            if (c == '{' || c == '%' || c == '#') return p;
            pos = p + 1;
        }
    }

    // Position after a closing delimiter `close` ("%}" or "#}"), applying '-', '+' and trim_blocks.
    size_t after_close(size_t close_pos, bool minus) const {
        size_t p = close_pos + 2;
        if (minus) {
            while (p < src_.size() && is_ascii_space(src_[p])) ++p;
        } else if (p < src_.size() && src_[p] == '\n') {
            ++p;
        }
        return p;
    }

    size_t lex_comment(size_t start, size_t p) {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) error("unterminated comment ('{#' without '#}')", start);
        bool plus = end > p && src_[end - 1] == '+';
        bool minus = end > p && src_[end - 1] == '-';
        if (plus) return end + 2;
        return after_close(end, minus);
    }

    bool is_raw(size_t p) const {
        while (p < src_.size() && is_ascii_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        while (p < src_.size() && is_ascii_space(src_[p])) ++p;
        return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
    }

    size_t lex_raw(size_t start, size_t p) {
        size_t close = src_.find("%}", p);
        bool minus = src_[close - 1] == '-';
        size_t body = minus ? after_close(close, true) : close + 2;  // no trim_blocks after raw
        size_t search = body;
        while (true) {
            size_t open = src_.find("{%", search);
            if (open == std::string::npos) error("unterminated raw block (missing endraw)", start);
            size_t q = open + 2;
            char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : 0;
            while (q < src_.size() && is_ascii_space(src_[q])) ++q;
            if (src_.compare(q, 6, "endraw") != 0) {
                search = open + 2;
                continue;
            }
            q += 6;
            while (q < src_.size() && is_ascii_space(src_[q])) ++q;
            bool end_minus = src_.compare(q, 3, "-%}") == 0;
            bool end_plus = src_.compare(q, 3, "+%}") == 0;
            if (end_minus || end_plus) ++q;
            if (src_.compare(q, 2, "%}") != 0) error("malformed endraw tag", open);
            std::string text = src_.substr(body, open - body);
            if (sign == '-') text = py_strip(text, false, true);
            emit_text(std::move(text), body);
            return end_plus ? q + 2 : after_close(q, end_minus);
        }
    }

    // Tokens of one {{ }} or {% %} tag; returns the position after its closing delimiter.
    size_t lex_tag(size_t start, size_t p, bool block) {
        push(block ? TokenType::BlockBegin : TokenType::VarBegin, "", start);
        int balance = 0;
        while (true) {
            while (p < src_.size() && is_ascii_space(src_[p])) ++p;
            if (p >= src_.size()) error(block ? "unterminated '{%' tag" : "unterminated '{{' tag", start);
            if (balance == 0) {
                if (block) {
                    if (src_.compare(p, 3, "-%}") == 0) {
                        push(TokenType::BlockEnd, "", p);
                        return after_close(p + 1, true);
                    }
                    if (src_.compare(p, 3, "+%}") == 0) {
                        push(TokenType::BlockEnd, "", p);
                        return p + 3;
                    }
                    if (src_.compare(p, 2, "%}") == 0) {
                        push(TokenType::BlockEnd, "", p);
                        return after_close(p, false);
                    }
                } else {
                    if (src_.compare(p, 3, "-}}") == 0) {
                        push(TokenType::VarEnd, "", p);
                        p += 3;
                        while (p < src_.size() && is_ascii_space(src_[p])) ++p;
                        return p;
                    }
                    if (src_.compare(p, 2, "}}") == 0) {
                        push(TokenType::VarEnd, "", p);
                        return p + 2;
                    }
                }
            }
            char c = src_[p];
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t q = p;
                while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
                push(TokenType::Name, src_.substr(p, q - p), p);
                p = q;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                p = lex_number(p);
            } else if (c == '\'' || c == '"') {
                p = lex_string(p);
            } else {
                static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                                  "~",  "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ".",
                                                  ",",  ":",  "|"};
                const char* found = nullptr;
                for (const char* op : ops)
                    if (src_.compare(p, std::strlen(op), op) == 0) {
                        found = op;
                        break;
                    }
                if (!found) error(std::string("unexpected character '") + c + "' in tag", p);
                if (*found == '(' || *found == '[' || *found == '{') ++balance;
                if ((*found == ')' || *found == ']' || *found == '}') && balance > 0) --balance;
                push(TokenType::Op, found, p);
                p += std::strlen(found);
            }
        }
    }

    size_t lex_number(size_t p) {
        size_t q = p;
        auto digits = [&] {
            while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                                       (src_[q] == '_' && q + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q + 1])))))
                ++q;
        };
        digits();
        bool is_float = false;
        bool after_dot = p > 0 && src_[p - 1] == '.';  // foo.0.1 is two attribute lookups
        if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
            ++q;
            digits();
            is_float = true;
        }
        if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
            size_t r = q + 1;
            if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
            if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
                q = r;
                digits();
                is_float = true;
            }
        }
        std::string text = src_.substr(p, q - p);
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        push(is_float ? TokenType::Float : TokenType::Int, text, p);
        return q;
    }

    size_t lex_string(size_t p) {
        char quote = src_[p];
        std::string out;
        size_t q = p + 1;
        auto hex = [&](size_t n) -> uint32_t {
            uint32_t v = 0;
            for (size_t k = 0; k < n; ++k) {
                if (q >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[q])))
                    error("truncated escape in string literal", q);
                char h = src_[q++];
                v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
            }
            return v;
        };
        while (true) {
            if (q >= src_.size()) error("unterminated string literal", p);
            char c = src_[q];
            if (c == quote) break;
            if (c != '\\') {
                out += c;
                ++q;
                continue;
            }
            if (q + 1 >= src_.size()) error("unterminated string literal", p);
            char e = src_[q + 1];
            q += 2;
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\n': break;  // line continuation
            case 'x': append_utf8(out, hex(2)); break;
            case 'u': append_utf8(out, hex(4)); break;
            case 'U': {
                uint32_t cp = hex(8);
                if (cp > 0x10FFFF) error("invalid \\U escape in string literal", q);
                append_utf8(out, cp);
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    uint32_t v = uint32_t(e - '0');
                    for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k)
                        v = v * 8 + uint32_t(src_[q++] - '0');
                    append_utf8(out, v);
                } else {
                    out += '\\';
                    out += e;
                }
            }
        }
        push(TokenType::String, std::move(out), p);
        return q + 1;
    }

    std::string src_;
    std::vector<size_t> line_starts_;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) { return Lexer(normalize_source(source)).run(); }

}  // namespace mvllm::jinja
