// Recursive-descent parser over the lexer's tokens, with jinja2's operator precedence (loosest
// first): x if c else y, or, and, not, comparisons / in / not in, + -, ~, * / // %, **, unary - +,
// then postfix (.attr, [key], [a:b:c], call) and the filter chain (| filter, is test).
#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace mvllm::jinja {
namespace {

constexpr int kMaxNesting = 128;

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

    Body parse() {
        std::string end;
        Body body = parse_body({}, &end);
        return body;
    }

private:
    struct DepthGuard {
        explicit DepthGuard(Parser& p) : p(p) {
            if (++p.depth_ > kMaxNesting) p.error("template nested too deeply (more than 128 levels)");
        }
        ~DepthGuard() { --p.depth_; }
        Parser& p;
    };

    const Token& cur() const { return tokens_[pos_]; }
    const Token& peek(size_t k = 1) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
    void advance() {
        if (pos_ + 1 < tokens_.size()) ++pos_;
    }
    bool is_op(const char* op) const { return cur().type == TokenType::Op && cur().value == op; }
    bool is_name(const char* name) const { return cur().type == TokenType::Name && cur().value == name; }
    bool accept_op(const char* op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool accept_name(const char* name) {
        if (!is_name(name)) return false;
        advance();
        return true;
    }

    static std::string describe(const Token& t) {
        switch (t.type) {
        case TokenType::Text: return "text";
        case TokenType::VarBegin: return "'{{'";
        case TokenType::VarEnd: return "'}}'";
        case TokenType::BlockBegin: return "'{%'";
        case TokenType::BlockEnd: return "'%}'";
        case TokenType::Eof: return "end of template";
        case TokenType::String: return "string literal";
        default: return "'" + t.value + "'";
        }
    }

    [[noreturn]] void error(const std::string& message) const { throw JinjaError(message, cur().line, cur().column); }

    void expect_op(const char* op) {
        if (!accept_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
    }
    std::string expect_name() {
        if (cur().type != TokenType::Name) error("expected a name, got " + describe(cur()));
        std::string name = cur().value;
        advance();
        return name;
    }
    void expect_block_end() {
        if (cur().type != TokenType::BlockEnd) error("expected end of statement '%}', got " + describe(cur()));
        advance();
    }

    std::unique_ptr<Expr> node(ExprKind kind, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = at.line;
        e->column = at.column;
        return e;
    }

    // ---- statements ------------------------------------------------------------------------
    // Parses until a {% tag %} named in `ends` (left unconsumed after '{%'; its name in *end).
    Body parse_body(const std::vector<std::string>& ends, std::string* end) {
        DepthGuard guard(*this);
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.type == TokenType::Eof) {
                if (!ends.empty()) error("unexpected end of template, expected '" + ends.back() + "'");
                return body;
            }
            if (t.type == TokenType::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Text;
                s->line = t.line;
                s->text = t.value;
                body.push_back(std::move(s));
                advance();
            } else if (t.type == TokenType::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Output;
                s->line = t.line;
                s->column = t.column;
                advance();
                s->expr = parse_tuple(true);
                if (cur().type != TokenType::VarEnd) error("expected '}}', got " + describe(cur()));
                advance();
                body.push_back(std::move(s));
            } else if (t.type == TokenType::BlockBegin) {
                advance();
                if (cur().type != TokenType::Name) error("expected a tag name after '{%', got " + describe(cur()));
                for (const auto& e : ends) {
                    if (cur().value == e) {
                        *end = e;
                        return body;
                    }
                }
                body.push_back(parse_statement());
            } else {
                error("unexpected " + describe(t));
            }
        }
    }

    std::unique_ptr<Stmt> parse_statement() {
        const Token& t = cur();
        auto s = std::make_unique<Stmt>();
        s->line = t.line;
        s->column = t.column;
        std::string tag = t.value;
        advance();
        std::string end;
        if (tag == "if") {
            s->kind = StmtKind::If;
            auto cond = parse_tuple(false);
            while (true) {
                expect_block_end();
                Body branch = parse_body({"elif", "else", "endif"}, &end);
                s->branches.emplace_back(std::move(cond), std::move(branch));
                advance();
                if (end == "elif") {
                    cond = parse_tuple(false);
                    continue;
                }
                if (end == "else") {
                    expect_block_end();
                    s->else_body = parse_body({"endif"}, &end);
                    advance();
                }
                break;
            }
        } else if (tag == "for") {
            s->kind = StmtKind::For;
            s->targets = parse_targets();
            if (!accept_name("in")) error("expected 'in' in for loop, got " + describe(cur()));
            s->expr = parse_tuple(false, /*allow_condexpr=*/false);
            if (accept_name("if")) s->cond = parse_expression();
            if (is_name("recursive")) error("recursive for loops are not supported");
            expect_block_end();
            ++loop_depth_;
            s->body = parse_body({"else", "endfor"}, &end);
            --loop_depth_;
            advance();
            if (end == "else") {
                expect_block_end();
                s->else_body = parse_body({"endfor"}, &end);
                advance();
            }
        } else if (tag == "set") {
            if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().value == "." &&
                peek(2).type == TokenType::Name) {
                s->kind = StmtKind::Set;
                s->targets.push_back(cur().value);
                s->attribute = peek(2).value;
                advance();
                advance();
                advance();
                expect_op("=");
                s->expr = parse_tuple(true);
            } else {
                s->targets = parse_targets();
                if (accept_op("=")) {
                    s->kind = StmtKind::Set;
                    s->expr = parse_tuple(true);
                } else {
                    if (s->targets.size() != 1) error("block set takes a single name");
                    s->kind = StmtKind::SetBlock;
                    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
                    expect_block_end();
                    s->body = parse_body({"endset"}, &end);
                    advance();
                }
            }
        } else if (tag == "macro") {
            s->kind = StmtKind::Macro;
            s->targets.push_back(expect_name());
            expect_op("(");
            while (!accept_op(")")) {
                if (!s->params.empty()) expect_op(",");
                if (accept_op(")")) break;
                MacroParam p;
                p.name = expect_name();
                if (accept_op("=")) p.default_value = parse_expression();
                s->params.push_back(std::move(p));
            }
            expect_block_end();
            int saved = loop_depth_;
            loop_depth_ = 0;
            s->body = parse_body({"endmacro"}, &end);
            loop_depth_ = saved;
            advance();
            if (cur().type == TokenType::Name && cur().value == s->targets[0]) advance();
        } else if (tag == "break" || tag == "continue") {
            if (loop_depth_ == 0) throw JinjaError("'" + tag + "' outside a for loop", t.line, t.column);
            s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
        } else if (tag == "filter") {
            s->kind = StmtKind::FilterBlock;
            s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
            expect_block_end();
            s->body = parse_body({"endfilter"}, &end);
            advance();
        } else if (tag == "generation") {
            s->kind = StmtKind::Scope;
            expect_block_end();
            s->body = parse_body({"endgeneration"}, &end);
            advance();
        } else if (tag == "call" || tag == "include" || tag == "import" || tag == "from" || tag == "extends" ||
                   tag == "block" || tag == "with" || tag == "do" || tag == "autoescape" || tag == "trans") {
            throw JinjaError("unsupported tag '" + tag + "'", t.line, t.column);
        } else {
            throw JinjaError("unknown tag '" + tag + "'", t.line, t.column);
        }
        expect_block_end();
        return s;
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> names;
        bool paren = accept_op("(");
        do {
            if (paren && is_op(")")) break;
            names.push_back(expect_name());
        } while (accept_op(","));
        if (paren) expect_op(")");
        return names;
    }

    // ---- expressions -----------------------------------------------------------------------
    std::unique_ptr<Expr> parse_tuple(bool allow_tuple, bool allow_condexpr = true) {
        const Token& at = cur();
        auto first = allow_condexpr ? parse_expression() : parse_or();
        if (!is_op(",")) return first;
        auto tuple = node(ExprKind::Tuple, at);
        tuple->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (cur().type == TokenType::VarEnd || cur().type == TokenType::BlockEnd) break;
            tuple->args.push_back(allow_condexpr ? parse_expression() : parse_or());
        }
        (void)allow_tuple;
        return tuple;
    }

    std::unique_ptr<Expr> parse_expression() {
        DepthGuard guard(*this);
        auto expr = parse_or();
        while (is_name("if")) {
            auto cond_expr = node(ExprKind::CondExpr, cur());
            advance();
            auto cond = parse_or();
            std::unique_ptr<Expr> otherwise;
            if (accept_name("else")) otherwise = parse_expression();
            cond_expr->args.push_back(std::move(expr));
            cond_expr->args.push_back(std::move(cond));
            cond_expr->args.push_back(std::move(otherwise));
            expr = std::move(cond_expr);
        }
        return expr;
    }

    std::unique_ptr<Expr> binary(const char* op, std::unique_ptr<Expr> lhs, std::unique_ptr<Expr> rhs, const Token& at) {
        auto e = node(ExprKind::Binary, at);
        e->name = op;
        e->args.push_back(std::move(lhs));
        e->args.push_back(std::move(rhs));
        return e;
    }

    std::unique_ptr<Expr> parse_or() {
        auto lhs = parse_and();
        while (is_name("or")) {
            Token at = cur();
            advance();
            lhs = binary("or", std::move(lhs), parse_and(), at);
        }
        return lhs;
    }

    std::unique_ptr<Expr> parse_and() {
        auto lhs = parse_not();
        while (is_name("and")) {
            Token at = cur();
            advance();
            lhs = binary("and", std::move(lhs), parse_not(), at);
        }
        return lhs;
    }

    std::unique_ptr<Expr> parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto e = node(ExprKind::Unary, cur());
            advance();
            e->name = "not";
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    std::unique_ptr<Expr> parse_compare() {
        Token at = cur();
        auto first = parse_math1();
        std::unique_ptr<Expr> cmp;
        while (true) {
            std::string op;
            if (cur().type == TokenType::Op &&
                (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
                 cur().value == "<=" || cur().value == ">=")) {
                op = cur().value;
                advance();
            } else if (is_name("in")) {
                op = "in";
                advance();
            } else if (is_name("not") && peek().type == TokenType::Name && peek().value == "in") {
                op = "not in";
                advance();
                advance();
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(ExprKind::Compare, at);
                cmp->args.push_back(std::move(first));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    std::unique_ptr<Expr> parse_math1() {
        auto lhs = parse_concat();
        while (is_op("+") || is_op("-")) {
            Token at = cur();
            advance();
            lhs = binary(at.value == "+" ? "+" : "-", std::move(lhs), parse_concat(), at);
        }
        return lhs;
    }

    std::unique_ptr<Expr> parse_concat() {
        auto lhs = parse_math2();
        while (is_op("~")) {
            Token at = cur();
            advance();
            lhs = binary("~", std::move(lhs), parse_math2(), at);
        }
        return lhs;
    }

    std::unique_ptr<Expr> parse_math2() {
        auto lhs = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            Token at = cur();
            advance();
            auto rhs = parse_pow();
            auto e = node(ExprKind::Binary, at);
            e->name = at.value;
            e->args.push_back(std::move(lhs));
            e->args.push_back(std::move(rhs));
            lhs = std::move(e);
        }
        return lhs;
    }

    std::unique_ptr<Expr> parse_pow() {
        auto lhs = parse_unary(true);
        while (is_op("**")) {
            Token at = cur();
            advance();
            lhs = binary("**", std::move(lhs), parse_unary(true), at);
        }
        return lhs;
    }

    std::unique_ptr<Expr> parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        std::unique_ptr<Expr> e;
        if (is_op("-") || is_op("+")) {
            e = node(ExprKind::Unary, cur());
            e->name = cur().value;
            advance();
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_postfix(parse_primary());
        }
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    std::unique_ptr<Expr> parse_primary() {
        const Token t = cur();
        switch (t.type) {
        case TokenType::Name: {
            advance();
            auto e = node(ExprKind::Literal, t);
            if (t.value == "true" || t.value == "True") e->literal = Value(true);
            else if (t.value == "false" || t.value == "False") e->literal = Value(false);
            else if (t.value == "none" || t.value == "None") e->literal = Value::none();
            else {
                e->kind = ExprKind::Name;
                e->name = t.value;
            }
            return e;
        }
        case TokenType::String: {
            std::string s;
            while (cur().type == TokenType::String) {
                s += cur().value;
                advance();
            }
            auto e = node(ExprKind::Literal, t);
            e->literal = Value(std::move(s));
            return e;
        }
        case TokenType::Int: {
            advance();
            errno = 0;
            char* end = nullptr;
            long long v = std::strtoll(t.value.c_str(), &end, 10);
            if (errno == ERANGE) throw JinjaError("integer literal out of range", t.line, t.column);
            auto e = node(ExprKind::Literal, t);
            e->literal = Value(int64_t(v));
            return e;
        }
        case TokenType::Float: {
            advance();
            auto e = node(ExprKind::Literal, t);
            e->literal = Value(std::strtod(t.value.c_str(), nullptr));
            return e;
        }
        case TokenType::Op:
            if (t.value == "(") {
                advance();
                if (accept_op(")")) {
                    auto e = node(ExprKind::Tuple, t);
                    return e;
                }
                auto inner = parse_expression();
                if (is_op(",")) {
                    auto tuple = node(ExprKind::Tuple, t);
                    tuple->args.push_back(std::move(inner));
                    while (accept_op(",")) {
                        if (is_op(")")) break;
                        tuple->args.push_back(parse_expression());
                    }
                    inner = std::move(tuple);
                }
                expect_op(")");
                return inner;
            }
            if (t.value == "[") {
                advance();
                auto e = node(ExprKind::List, t);
                while (!accept_op("]")) {
                    if (!e->args.empty()) {
                        expect_op(",");
                        if (accept_op("]")) break;
                    }
                    e->args.push_back(parse_expression());
                }
                return e;
            }
            if (t.value == "{") {
                advance();
                auto e = node(ExprKind::Dict, t);
                while (!accept_op("}")) {
                    if (!e->args.empty()) {
                        expect_op(",");
                        if (accept_op("}")) break;
                    }
                    e->args.push_back(parse_expression());
                    expect_op(":");
                    e->args.push_back(parse_expression());
                }
                return e;
            }
            break;
        default: break;
        }
        error("unexpected " + describe(t) + " in expression");
    }

    std::unique_ptr<Expr> parse_postfix(std::unique_ptr<Expr> e) {
        while (true) {
            const Token at = cur();
            if (accept_op(".")) {
                if (cur().type == TokenType::Name) {
                    auto g = node(ExprKind::GetAttr, at);
                    g->name = cur().value;
                    advance();
                    g->args.push_back(std::move(e));
                    e = std::move(g);
                } else if (cur().type == TokenType::Int) {
                    auto g = node(ExprKind::GetItem, at);
                    g->args.push_back(std::move(e));
                    g->args.push_back(parse_primary());
                    e = std::move(g);
                } else {
                    error("expected an attribute name after '.', got " + describe(cur()));
                }
            } else if (accept_op("[")) {
                e = parse_subscript(std::move(e), at);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    std::unique_ptr<Expr> parse_subscript(std::unique_ptr<Expr> obj, const Token& at) {
        std::unique_ptr<Expr> start;
        if (!is_op(":")) {
            start = parse_expression();
            if (accept_op("]")) {
                auto g = node(ExprKind::GetItem, at);
                g->args.push_back(std::move(obj));
                g->args.push_back(std::move(start));
                return g;
            }
        }
        auto s = node(ExprKind::Slice, at);
        s->args.push_back(std::move(obj));
        s->args.push_back(std::move(start));
        expect_op(":");
        std::unique_ptr<Expr> stop, step;
        if (!is_op("]") && !is_op(":")) stop = parse_expression();
        if (accept_op(":") && !is_op("]")) step = parse_expression();
        expect_op("]");
        s->args.push_back(std::move(stop));
        s->args.push_back(std::move(step));
        return s;
    }

    // '(' args ')' into e->args (after the slots already there) and e->kwargs.
    void parse_call_args(Expr& e) {
        expect_op("(");
        bool first = true;
        while (!accept_op(")")) {
            if (!first) {
                expect_op(",");
                if (accept_op(")")) break;
            }
            first = false;
            if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
            if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().value == "=") {
                std::string key = cur().value;
                advance();
                advance();
                e.kwargs.emplace_back(key, parse_expression());
            } else {
                if (!e.kwargs.empty()) error("positional argument follows keyword argument");
                e.args.push_back(parse_expression());
            }
        }
    }

    std::unique_ptr<Expr> parse_call(std::unique_ptr<Expr> callee) {
        auto c = node(ExprKind::Call, cur());
        c->args.push_back(std::move(callee));
        parse_call_args(*c);
        return c;
    }

    std::unique_ptr<Expr> parse_filter_expr(std::unique_ptr<Expr> e) {
        while (true) {
            if (is_op("|")) {
                e = parse_filter_chain(std::move(e));
            } else if (is_name("is")) {
                e = parse_test(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    // One or more '| name(args)'; with leading_pipe false the first '|' is absent ({% filter %}).
    std::unique_ptr<Expr> parse_filter_chain(std::unique_ptr<Expr> operand, bool leading_pipe = true) {
        bool first = true;
        while ((first && !leading_pipe) || is_op("|")) {
            if (!(first && !leading_pipe)) advance();
            first = false;
            auto f = node(ExprKind::Filter, cur());
            f->name = expect_name();
            f->args.push_back(std::move(operand));
            if (is_op("(")) parse_call_args(*f);
            operand = std::move(f);
            if (!leading_pipe) leading_pipe = true;
        }
        return operand;
    }

    std::unique_ptr<Expr> parse_test(std::unique_ptr<Expr> operand) {
        auto t = node(ExprKind::Test, cur());
        advance();  // 'is'
        t->negated = accept_name("not");
        t->name = expect_name();
        t->args.push_back(std::move(operand));
        if (is_op("(")) {
            parse_call_args(*t);
        } else if ((cur().type == TokenType::Name || cur().type == TokenType::String || cur().type == TokenType::Int ||
                    cur().type == TokenType::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
            if (is_name("is")) error("tests cannot be chained with 'is'");
            t->args.push_back(parse_postfix(parse_primary()));
        }
        return t;
    }

    std::vector<Token> tokens_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) { return Parser(lex_template(source)).parse(); }

}  // namespace mvllm::jinja
