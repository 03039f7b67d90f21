// Two tiers of errors (DESIGN.md decision 5).
//
//  * MVLLM_CHECK(cond) << "context": an internal invariant. Always on; on failure prints file:line
//    and the message, then aborts. Never used for anything a user controls.
//  * Status / Result<T>: anything a user controls (a file, a flag, a request). The CLI prints the
//    message; the server maps it to an HTTP error. Bad input never aborts the process.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace mvllm {

class Status {
public:
    Status() = default;  // ok
    static Status ok() { return Status(); }
    static Status error(std::string message) {
        Status s;
        s.ok_ = false;
        s.message_ = std::move(message);
        return s;
    }
    bool is_ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const std::string& message() const { return message_; }

    // Prefix the message with context ("model.gguf: " + message).
    Status with_context(const std::string& context) const {
        if (ok_) return *this;
        return error(context + ": " + message_);
    }

private:
    bool ok_ = true;
    std::string message_;
};

// Either a value or an error Status.
template <typename T>
class Result {
public:
    Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit on purpose
    Result(Status status) : v_(std::move(status)) {       // NOLINT: implicit on purpose
        if (std::get<Status>(v_).is_ok()) std::get<Status>(v_) = Status::error("empty result");
    }
    bool is_ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return is_ok(); }
    const Status& status() const {
        static const Status ok_status;
        return is_ok() ? ok_status : std::get<Status>(v_);
    }
    T& value() & { return std::get<T>(v_); }
    const T& value() const& { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() { return value(); }

private:
    std::variant<T, Status> v_;
};

// Formats its arguments into a Status error: return make_error("bad magic ", magic);
template <typename... Args>
Status make_error(Args&&... args) {
    std::ostringstream os;
    (os << ... << args);
    return Status::error(os.str());
}

namespace detail {
// Collects the message of a failed CHECK and aborts in its destructor.
class CheckFailure {
public:
    CheckFailure(const char* file, int line, const char* cond) {
        os_ << file << ":" << line << ": CHECK failed: " << cond << " ";
    }
    [[noreturn]] ~CheckFailure() {
        std::fprintf(stderr, "%s\n", os_.str().c_str());
        std::fflush(stderr);
        std::abort();
    }
    template <typename T>
    CheckFailure& operator<<(const T& v) {
        os_ << v;
        return *this;
    }

private:
    std::ostringstream os_;
};
}  // namespace detail

}  // namespace mvllm

#define MVLLM_CHECK(cond) \
    if (__builtin_expect(!!(cond), 1)) { \
    } else \
        ::mvllm::detail::CheckFailure(__FILE__, __LINE__, #cond)

// Propagate an error Status from an expression returning Status.
#define MVLLM_TRY(expr)                       \
    do {                                      \
        ::mvllm::Status _st = (expr);         \
        if (!_st.is_ok()) return _st;         \
    } while (0)

#define MVLLM_CONCAT_INNER(a, b) a##b
#define MVLLM_CONCAT(a, b) MVLLM_CONCAT_INNER(a, b)
// Assign the value of a Result or propagate its error: MVLLM_ASSIGN_OR_RETURN(auto file, open(p));
#define MVLLM_ASSIGN_OR_RETURN(lhs, expr) \
    MVLLM_ASSIGN_OR_RETURN_IMPL(MVLLM_CONCAT(_res_, __LINE__), lhs, expr)
#define MVLLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                              \
    if (!tmp.is_ok()) return tmp.status();          \
    lhs = std::move(tmp).value()
