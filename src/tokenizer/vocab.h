// What a tokenizer is made of, independent of where it was loaded from: the vocabulary with
// scores and token types, the merges, the pre-tokenizer and the special-token ids. Both loaders
// (GGUF metadata, tokenizer.json) fill a VocabData; make_tokenizer() builds the tokenizer; the
// GGUF writer writes it back with the tokenizer.ggml.* names llama.cpp reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace mvllm {

// tokenizer.ggml.token_type values (llama.cpp's numbering).
enum class TokenType : int32_t {
    UNDEFINED = 0,
    NORMAL = 1,
    UNKNOWN = 2,
    CONTROL = 3,       // special: parsed in text only when asked, skipped by decode(skip_special)
    USER_DEFINED = 4,  // added token: always parsed in text, stored as raw text
    UNUSED = 5,
    BYTE = 6,          // <0xNN> byte fallback (SentencePiece)
};

enum class VocabKind { BPE, SPM };  // tokenizer.ggml.model "gpt2" / "llama"

struct VocabData {
    VocabKind kind = VocabKind::BPE;
    std::vector<std::string> tokens;  // [n_vocab] as stored (byte-level text for BPE)
    std::vector<float> scores;        // [n_vocab] SPM merge scores (empty for BPE)
    std::vector<TokenType> types;     // [n_vocab]
    std::vector<std::string> merges;  // BPE: "left right", by rank
    std::string pre = "default";      // tokenizer.ggml.pre
    std::string pre_pattern;          // the regex (from pre, or tokenizer.json's Split)
    bool ignore_merges = false;       // BPE: a word that is itself a token is not merged
    bool add_space_prefix = true;     // SPM: "▁" before the text
    bool add_bos = false, add_eos = false;
    int32_t bos_id = -1, eos_id = -1, eot_id = -1, unk_id = -1, pad_id = -1;
    std::string chat_template;
};

// Checks the ids and sizes, then builds the BPE or SPM tokenizer.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(VocabData data);

// Loaders (load_gguf.cpp, load_hf.cpp).
Result<VocabData> read_gguf_vocab(const GgufFile& file);
Result<VocabData> read_hf_vocab(const std::string& dir);
void write_gguf_vocab(const VocabData& data, GgufWriter& writer);

}  // namespace mvllm
