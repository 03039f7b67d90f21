// Pre-tokenization: the regular expression that cuts text into words before BPE merges, run with
// PCRE2 (UTF + UCP: \p{L}, \p{N} and \s are full Unicode classes; JIT-compiled when available).
// Like Hugging Face's Split(behavior = Isolated), both the matches and the text between them
// become words.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mvllm {

// The pattern of a tokenizer.ggml.pre name ("gpt2", "llama-bpe", "qwen2", "default"); nullptr
// when unknown. Aliases used by llama.cpp for the same expressions are accepted too.
const char* pre_pattern_for_name(std::string_view name);
// The tokenizer.ggml.pre name of a known pattern; empty when the pattern is not a known one.
std::string pre_name_for_pattern(std::string_view pattern);

class PreTokenizer {
public:
    static Result<std::unique_ptr<PreTokenizer>> create(const std::string& pattern);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Appends the words of text (views into text) to words. Text that is not valid UTF-8 is cut
    // at each invalid byte, which becomes a word of its own.
    void split(std::string_view text, std::vector<std::string_view>& words) const;
    const std::string& pattern() const { return pattern_; }

private:
    PreTokenizer() = default;
    void split_valid(std::string_view text, std::vector<std::string_view>& words) const;
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
    bool jit_ = false;
};

}  // namespace mvllm
