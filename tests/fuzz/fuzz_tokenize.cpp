// Fuzz target: encode and decode arbitrary bytes with the real tokenizers: the shipped model's
// (GGUF, byte-level BPE + ChatML specials) and, when scripts/fetch_tokenizers.sh has fetched
// them, Qwen3's and Llama-3's tokenizer.json.
//
// Input: selector byte (tokenizer, add_bos, parse_special, skip_special), then the text. The same
// bytes are also read as little-endian int32 ids (any value, as /detokenize may receive).
// Properties: encode returns vocabulary ids; byte-level BPE is lossless (decode(encode(text)) ==
// text for valid UTF-8 without special parsing); the incremental decoder only ever emits valid
// UTF-8, and for valid text it emits exactly what decode() does.
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace mvllm;

namespace {

std::vector<std::unique_ptr<Tokenizer>> load_tokenizers() {
    std::vector<std::unique_ptr<Tokenizer>> out;
    auto shipped = Tokenizer::from_path(fuzz::source_path("models/mvllm-austen-q8_0.gguf"));
    if (!shipped) {
        std::fprintf(stderr, "fuzz_tokenize: %s\n", shipped.status().message().c_str());
        std::abort();
    }
    out.push_back(std::move(shipped).value());
    for (const char* name : {"tokenizers/qwen3", "tokenizers/llama3"}) {
        auto tok = Tokenizer::from_hf_dir(fuzz::data_path(name));
        if (tok) out.push_back(std::move(tok).value());
        else std::fprintf(stderr, "fuzz_tokenize: skipping %s (%s)\n", name, tok.status().message().c_str());
    }
    return out;
}

const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
    static const std::vector<std::unique_ptr<Tokenizer>> loaded = load_tokenizers();
    return loaded;
}

}  // namespace

// Loading the three tokenizers takes seconds under ASan: done once, outside the timed inputs.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)tokenizers();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto& all = tokenizers();
    fuzz::Input in(data, size);
    const uint8_t selector = in.byte();
    const Tokenizer& tok = *all[(selector & 3) % all.size()];
    const bool add_bos = selector & 4, parse_special = selector & 8, skip_special = selector & 16;
    const std::string_view text = in.rest();

    const std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
    for (int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < tok.n_vocab(), "encode returns vocabulary ids");
    const std::string decoded = tok.decode(ids, false);
    if (!add_bos && !parse_special && !tok.strip_leading_space)
        FUZZ_REQUIRE(decoded == text, "byte-level BPE round-trips every byte");

    IncrementalDecoder stream(tok, skip_special);
    std::string streamed;
    for (int32_t id : ids) {
        const std::string piece = stream.push(id);
        FUZZ_REQUIRE(utf8_is_valid(piece), "streamed text is valid UTF-8");
        streamed += piece;
    }
    const std::string tail = stream.flush();
    FUZZ_REQUIRE(utf8_is_valid(tail), "flushed text is valid UTF-8");
    streamed += tail;
    const std::string whole = tok.decode(ids, skip_special);
    if (utf8_is_valid(whole)) FUZZ_REQUIRE(streamed == whole, "streaming decode equals decode for valid text");

    // The same bytes as arbitrary ids: out-of-range and negative ids are skipped, never read.
    std::vector<int32_t> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    (void)tok.decode(raw, skip_special);
    IncrementalDecoder raw_stream(tok, skip_special);
    for (int32_t id : raw) {
        FUZZ_REQUIRE(utf8_is_valid(raw_stream.push(id)), "streamed text is valid UTF-8");
        (void)tok.token_bytes(id);
        (void)tok.token_text(id);
        (void)tok.is_special(id);
    }
    FUZZ_REQUIRE(utf8_is_valid(raw_stream.flush()), "flushed text is valid UTF-8");
    return 0;
}
