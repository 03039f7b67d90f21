// The default TextStream: the tokenizer's UTF-8-safe IncrementalDecoder (Engine::create uses it
// when it is given a tokenizer and no TextStreamFactory).
#pragma once

#include <memory>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace mvllm {

class IncrementalTextStream final : public TextStream {
public:
    explicit IncrementalTextStream(const Tokenizer& tokenizer) : decoder_(tokenizer) {}
    std::string push(int32_t token) override { return decoder_.push(token); }
    std::string flush() override { return decoder_.flush(); }

private:
    IncrementalDecoder decoder_;
};

inline TextStreamFactory incremental_text_streams(const Tokenizer& tokenizer) {
    return [&tokenizer] { return std::make_unique<IncrementalTextStream>(tokenizer); };
}

}  // namespace mvllm
