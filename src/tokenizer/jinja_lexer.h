// Jinja lexer: template source -> a flat token stream, as jinja2's lexer produces it with
// trim_blocks=True and lstrip_blocks=True.
//
//   text {{ expression }} {% statement %} {# comment #} {% raw %}...{% endraw %}
//
// Whitespace control: '-' after an opening / before a closing delimiter strips all whitespace
// on that side; lstrip_blocks removes spaces and tabs between a line start and '{%' / '{#'
// (unless '{%+'); trim_blocks removes one newline after '%}' / '#}' (unless '+%}'). Newlines are
// normalised to '\n' and one trailing newline of the template is dropped (keep_trailing_newline
// is off). Comments produce no tokens.
#pragma once

#include <string>
#include <vector>

namespace mvllm::jinja {

enum class TokenType { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    TokenType type;
    std::string value;  // text, name, decoded string literal, number digits or operator
    int line = 0;
    int column = 0;
};

// Throws JinjaError (with line and column) on an unterminated tag, comment or string, or an
// unexpected character inside a tag.
std::vector<Token> lex_template(const std::string& source);

}  // namespace mvllm::jinja
