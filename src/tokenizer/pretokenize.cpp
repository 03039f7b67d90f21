#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <memory>

#include "tokenizer/unicode.h"

namespace mvllm {
namespace {

// GPT-2: contractions, optional space + letters / numbers / other symbols, whitespace.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3: case-insensitive contractions, one non-letter glued to a word, digits in runs of <= 3,
// newlines kept together.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but single digits.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct NamedPattern {
    const char* name;
    const char* pattern;
};
// The first entry of each pattern is its canonical name.
constexpr NamedPattern kPatterns[] = {
    {"gpt2", kGpt2Pattern},       {"default", kGpt2Pattern},   {"llama-bpe", kLlama3Pattern},
    {"llama3", kLlama3Pattern},   {"smaug-bpe", kLlama3Pattern}, {"qwen2", kQwen2Pattern},
};

}  // namespace

const char* pre_pattern_for_name(std::string_view name) {
    for (const auto& p : kPatterns)
        if (name == p.name) return p.pattern;
    return nullptr;
}

std::string pre_name_for_pattern(std::string_view pattern) {
    for (const auto& p : kPatterns)
        if (pattern == p.pattern) return p.name;
    return {};
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(const std::string& pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (!code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error_code, message, sizeof(message));
        return make_error("pre-tokenizer regex does not compile at offset ", error_offset, ": ",
                          reinterpret_cast<const char*>(message), " (pattern ", pattern, ")");
    }
    std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
    pre->pattern_ = pattern;
    pre->code_ = code;
    pre->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return pre;
}

PreTokenizer::~PreTokenizer() {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
    if (utf8_is_valid(text)) {
        split_valid(text, words);
        return;
    }
    size_t start = 0, pos = 0;
    uint32_t cp;
    while (pos < text.size()) {
        const size_t at = pos;
        if (utf8_next(text, pos, cp)) continue;
        split_valid(text.substr(start, at - start), words);
        words.push_back(text.substr(at, 1));
        pos = start = at + 1;
    }
    split_valid(text.substr(start), words);
}

void PreTokenizer::split_valid(std::string_view text, std::vector<std::string_view>& words) const {
    if (text.empty()) return;
    auto* code = static_cast<pcre2_code*>(code_);
    // One match block per thread: reused across calls, freed when the thread ends.
    struct MatchDataFree {
        void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
    };
    thread_local const std::unique_ptr<pcre2_match_data, MatchDataFree> match_owner(pcre2_match_data_create(4, nullptr));
    pcre2_match_data* match = match_owner.get();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, gap_start = 0;
    while (pos < text.size()) {
        const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match, nullptr)
                            : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match, nullptr);
        if (rc < 0) break;  // no further match (or a matching error): the rest is one word
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
        const size_t begin = ov[0], end = ov[1];
        if (begin > gap_start) words.push_back(text.substr(gap_start, begin - gap_start));
        if (end > begin) {
            words.push_back(text.substr(begin, end - begin));
            pos = gap_start = end;
        } else {
            // An empty match: step over one character, which stays in the gap.
            pos = begin + 1;
            while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
            gap_start = begin;
        }
    }
    if (gap_start < text.size()) words.push_back(text.substr(gap_start));
}

}  // namespace mvllm
