// Jinja syntax tree. One Expr / Stmt struct each, tagged by kind; the meaning of the child
// slots per kind is listed beside the enum values.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace mvllm::jinja {

enum class ExprKind {
    Literal,    // literal
    Name,       // name
    List,       // args: items
    Tuple,      // args: items
    Dict,       // args: key0, value0, key1, value1, ...
    GetAttr,    // args[0] object, name: attribute
    GetItem,    // args[0] object, args[1] key
    Slice,      // args[0] object, args[1..3] start/stop/step (null when absent)
    Call,       // args[0] callee, args[1..] positional, kwargs
    Filter,     // args[0] operand, name, args[1..] positional, kwargs
    Test,       // args[0] operand, name, args[1..], kwargs, negated
    Unary,      // name: "not" / "-" / "+", args[0]
    Binary,     // name: operator ("+", "and", "~", ...), args[0], args[1]
    Compare,    // args[0] first operand, ops[i] compares args[i] with args[i+1]
    CondExpr,   // args[0] value if true, args[1] condition, args[2] value if false (null: undefined)
};

struct Expr {
    ExprKind kind;
    int line = 0;
    int column = 0;
    std::string name;
    Value literal;
    bool negated = false;
    std::vector<std::unique_ptr<Expr>> args;
    std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
    std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
    Text,         // text
    Output,       // expr
    If,           // branches (condition, body), else_body
    For,          // targets, expr: iterable, cond: filter (may be null), body, else_body
    Set,          // targets (one name, or a tuple), or targets[0] + attribute (ns.attr); expr
    SetBlock,     // targets[0], body (rendered to a string), filters: optional | filter chain in expr
    Macro,        // targets[0]: name, params, body
    Break,
    Continue,
    FilterBlock,  // expr: a Filter chain applied to the rendered body (operand slot null)
    Scope,        // body only: {% generation %} of HF's AssistantTracker renders its body as is
};

struct MacroParam {
    std::string name;
    std::unique_ptr<Expr> default_value;  // null: required
};

struct Stmt {
    StmtKind kind;
    int line = 0;
    int column = 0;
    std::string text;
    std::vector<std::string> targets;
    std::string attribute;
    std::unique_ptr<Expr> expr;
    std::unique_ptr<Expr> cond;
    std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;
    Body body;
    Body else_body;
    std::vector<MacroParam> params;
};

// Throws JinjaError with line and column on a syntax error.
Body parse_template(const std::string& source);

}  // namespace mvllm::jinja
