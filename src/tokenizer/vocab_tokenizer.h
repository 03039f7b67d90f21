// The part of BPE and SPM tokenizers that does not depend on the model: the vocabulary, added /
// special tokens cut out of the text before the model sees it, BOS/EOS, decoding and GGUF output.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace mvllm {

class VocabTokenizer : public Tokenizer {
public:
    explicit VocabTokenizer(VocabData data);

    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override;
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
    std::string token_bytes(int32_t id) const override;
    const std::string& token_text(int32_t id) const override;
    int32_t n_vocab() const override { return static_cast<int32_t>(data_.tokens.size()); }
    bool is_special(int32_t id) const override;
    void write_gguf(GgufWriter& writer) const override;

    const VocabData& data() const { return data_; }
    int32_t find_token(std::string_view text) const;  // -1 when absent

protected:
    // Encodes text holding no added tokens. after_special: at the start of the text or right
    // after an added token (SPM puts its space prefix there).
    virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
    // Precomputes token_bytes for every id (called by the derived constructor).
    void init_bytes();
    virtual std::string compute_token_bytes(int32_t id) const = 0;
    bool is_added(int32_t id) const;  // CONTROL, USER_DEFINED or UNKNOWN: raw text, matched in text

    VocabData data_;
    std::unordered_map<std::string, int32_t> token_to_id_;

private:
    struct AddedToken {
        std::string text;
        int32_t id;
        bool special;  // parsed only when parse_special
    };
    // Longest added token that starts at text[pos] and may be parsed; nullptr when none.
    const AddedToken* match_added(std::string_view text, size_t pos, bool parse_special) const;

    std::vector<AddedToken> added_;                 // longest first
    std::array<std::vector<uint32_t>, 256> added_by_first_byte_;  // indices into added_
    std::vector<std::string> bytes_;                // [n_vocab] token_bytes
};

}  // namespace mvllm

namespace mvllm {
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(VocabData data);  // bpe.cpp
Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(VocabData data);  // spm.cpp
}  // namespace mvllm
