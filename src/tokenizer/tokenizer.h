// Tokenizers: byte-level BPE (GPT-2 / Llama 3 / Qwen2 pre-tokenizers) and SentencePiece-style
// vocabularies (Llama 2 / TinyLlama: scores, the U+2581 space marker, <0xNN> byte fallback),
// loaded from GGUF metadata (tokenizer.ggml.*) or from tokenizer.json + tokenizer_config.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mvllm {

class GgufFile;
class GgufWriter;

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
    // dir holds tokenizer.json (and optionally tokenizer_config.json).
    static Result<std::unique_ptr<Tokenizer>> from_hf_dir(const std::string& dir);
    // A folder holding tokenizer.json, or a GGUF file (a vocab-only one too).
    static Result<std::unique_ptr<Tokenizer>> from_path(const std::string& path);

    // Text -> ids. Special tokens written in the text are parsed as specials only when
    // parse_special (chat templates ask for it); otherwise they are plain text.
    // add_bos prepends BOS when the vocabulary has one and its config asks for it.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const = 0;
    // Ids -> text (specials rendered as their text unless skip_special).
    virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
    // The bytes of one token (after byte-level / byte-fallback mapping).
    virtual std::string token_bytes(int32_t id) const = 0;
    virtual const std::string& token_text(int32_t id) const = 0;  // as stored in the vocabulary
    virtual int32_t n_vocab() const = 0;
    virtual bool is_special(int32_t id) const = 0;

    int32_t bos_id = -1;
    int32_t eos_id = -1;
    std::vector<int32_t> stop_ids;   // eos plus end-of-turn tokens (<|im_end|>, <|eot_id|>, ...)
    bool add_bos_default = false;
    std::string chat_template;       // Jinja source, empty when none
    std::string bos_text, eos_text;  // for templates
    bool strip_leading_space = false;  // SPM: decoding drops the space the encoder put first

    // Writes tokenizer.ggml.* (+ tokenizer.chat_template) so a GGUF file carries this tokenizer.
    virtual void write_gguf(GgufWriter& writer) const = 0;
};

// Streams text from ids without ever emitting a broken UTF-8 sequence: bytes of an incomplete
// character are held back until the character completes.
class IncrementalDecoder {
public:
    explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = true)
        : tokenizer_(tokenizer), skip_special_(skip_special) {}
    std::string push(int32_t id);  // the newly complete text (may be empty)
    std::string flush();           // whatever is pending (invalid bytes as U+FFFD)

private:
    const Tokenizer& tokenizer_;
    bool skip_special_;
    std::string pending_;
    bool at_start_ = true;  // nothing emitted yet (see Tokenizer::strip_leading_space)
};

}  // namespace mvllm
