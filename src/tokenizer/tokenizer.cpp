#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>

#include "io/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace mvllm {

// ---- loading ----------------------------------------------------------------------------------

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
    auto data = read_gguf_vocab(file);
    if (!data) return data.status().with_context(file.path());
    auto tok = make_tokenizer(std::move(data).value());
    if (!tok) return tok.status().with_context(file.path());
    return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_dir(const std::string& dir) {
    MVLLM_ASSIGN_OR_RETURN(VocabData data, read_hf_vocab(dir));
    auto tok = make_tokenizer(std::move(data));
    if (!tok) return tok.status().with_context(dir);
    return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_path(const std::string& path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return make_error(path, ": no such file or folder");
    if (S_ISDIR(st.st_mode)) return from_hf_dir(path);
    MVLLM_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
    return from_gguf(*file);
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(VocabData data) {
    const size_t n = data.tokens.size();
    if (n == 0) return Status::error("the vocabulary is empty");
    if (data.types.empty()) data.types.assign(n, TokenType::NORMAL);
    if (data.types.size() != n)
        return make_error("token_type has ", data.types.size(), " entries for ", n, " tokens");
    if (!data.scores.empty() && data.scores.size() != n)
        return make_error("scores has ", data.scores.size(), " entries for ", n, " tokens");
    for (int32_t* id : {&data.bos_id, &data.eos_id, &data.eot_id, &data.unk_id, &data.pad_id}) {
        if (*id >= static_cast<int64_t>(n))
            return make_error("special token id ", *id, " is outside the vocabulary of ", n, " tokens");
    }
    return data.kind == VocabKind::BPE ? make_bpe_tokenizer(std::move(data)) : make_spm_tokenizer(std::move(data));
}

// ---- VocabTokenizer ---------------------------------------------------------------------------

VocabTokenizer::VocabTokenizer(VocabData data) : data_(std::move(data)) {
    const auto n = static_cast<int32_t>(data_.tokens.size());
    token_to_id_.reserve(n);
    for (int32_t id = 0; id < n; ++id) token_to_id_.emplace(data_.tokens[id], id);  // first wins

    for (int32_t id = 0; id < n; ++id) {
        if (!is_added(id) || data_.tokens[id].empty()) continue;
        added_.push_back({data_.tokens[id], id, data_.types[id] != TokenType::USER_DEFINED});
    }
    std::stable_sort(added_.begin(), added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.text.size() > b.text.size(); });
    for (uint32_t i = 0; i < added_.size(); ++i)
        added_by_first_byte_[static_cast<uint8_t>(added_[i].text[0])].push_back(i);

    bos_id = data_.bos_id;
    eos_id = data_.eos_id;
    add_bos_default = data_.add_bos;
    chat_template = data_.chat_template;
    if (bos_id >= 0) bos_text = data_.tokens[bos_id];
    if (eos_id >= 0) eos_text = data_.tokens[eos_id];
    auto add_stop = [&](int32_t id) {
        if (id >= 0 && std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end()) stop_ids.push_back(id);
    };
    add_stop(eos_id);
    add_stop(data_.eot_id);
    for (const char* text : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>", "<|eom_id|>"}) {
        const int32_t id = find_token(text);
        if (id >= 0 && is_added(id)) add_stop(id);
    }
}

void VocabTokenizer::init_bytes() {
    bytes_.resize(data_.tokens.size());
    for (size_t id = 0; id < bytes_.size(); ++id) bytes_[id] = compute_token_bytes(static_cast<int32_t>(id));
}

int32_t VocabTokenizer::find_token(std::string_view text) const {
    auto it = token_to_id_.find(std::string(text));
    return it == token_to_id_.end() ? -1 : it->second;
}

bool VocabTokenizer::is_added(int32_t id) const {
    const TokenType t = data_.types[id];
    return t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN;
}

bool VocabTokenizer::is_special(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return false;
    const TokenType t = data_.types[id];
    return t == TokenType::CONTROL || t == TokenType::UNKNOWN;
}

const std::string& VocabTokenizer::token_text(int32_t id) const {
    static const std::string empty;
    return id >= 0 && id < n_vocab() ? data_.tokens[id] : empty;
}

std::string VocabTokenizer::token_bytes(int32_t id) const {
    return id >= 0 && id < static_cast<int32_t>(bytes_.size()) ? bytes_[id] : std::string();
}

const VocabTokenizer::AddedToken* VocabTokenizer::match_added(std::string_view text, size_t pos,
                                                              bool parse_special) const {
    for (uint32_t i : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
        const AddedToken& a = added_[i];
        if (a.special && !parse_special) continue;
        if (text.size() - pos >= a.text.size() && text.compare(pos, a.text.size(), a.text) == 0) return &a;
    }
    return nullptr;
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos && add_bos_default && bos_id >= 0) out.push_back(bos_id);
    // Leftmost-longest added tokens cut the text; the pieces between go to the model.
    size_t start = 0;
    bool after_special = true;
    for (size_t pos = 0; pos < text.size(); ++pos) {
        if (added_by_first_byte_[static_cast<uint8_t>(text[pos])].empty()) continue;
        const AddedToken* a = match_added(text, pos, parse_special);
        if (!a) continue;
        if (pos > start) encode_fragment(text.substr(start, pos - start), after_special, out);
        out.push_back(a->id);
        after_special = true;
        start = pos + a->text.size();
        pos = start - 1;
    }
    if (start < text.size()) encode_fragment(text.substr(start), after_special, out);
    if (add_bos && data_.add_eos && eos_id >= 0) out.push_back(eos_id);
    return out;
}

std::string VocabTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    bool at_start = true;
    for (int32_t id : ids) {
        if (id < 0 || id >= n_vocab()) continue;
        if (skip_special && is_special(id)) continue;
        const std::string& bytes = bytes_[id];
        if (at_start && strip_leading_space && !is_added(id) && !bytes.empty() && bytes[0] == ' ') {
            out.append(bytes, 1);
        } else {
            out += bytes;
        }
        at_start = false;
    }
    return out;
}

void VocabTokenizer::write_gguf(GgufWriter& writer) const { write_gguf_vocab(data_, writer); }

// ---- IncrementalDecoder -----------------------------------------------------------------------

std::string IncrementalDecoder::push(int32_t id) {
    if (id < 0 || id >= tokenizer_.n_vocab()) return {};
    if (skip_special_ && tokenizer_.is_special(id)) return {};
    std::string bytes = at_start_ ? tokenizer_.decode({id}, skip_special_) : tokenizer_.token_bytes(id);
    at_start_ = false;
    pending_ += bytes;
    const size_t n = utf8_complete_prefix(pending_);
    if (n == 0) return {};
    std::string out = utf8_sanitize(std::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
    return out;
}

std::string IncrementalDecoder::flush() {
    std::string out = utf8_sanitize(pending_);
    pending_.clear();
    return out;
}

}  // namespace mvllm
