// SentencePiece-style vocabularies (tokenizer.ggml.model "llama": Llama 2, TinyLlama, Mistral).
//
// encode: spaces become U+2581 "▁" (and one "▁" goes before the text, or after an added token,
// when add_space_prefix); the text starts as one symbol per character; repeatedly the adjacent
// pair whose concatenation is a vocabulary token with the highest score is merged (ties: leftmost).
// A final symbol that is no token is spelt with <0xNN> byte tokens (or <unk> without them).
#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace mvllm {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public VocabTokenizer {
public:
    explicit SpmTokenizer(VocabData data) : VocabTokenizer(std::move(data)) {
        if (data_.scores.empty()) data_.scores.assign(data_.tokens.size(), 0.0f);
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof(name), "<0x%02X>", b);
            byte_ids_[b] = find_token(name);
        }
        strip_leading_space = data_.add_space_prefix;
        init_bytes();
    }

protected:
    void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
        std::string s;
        s.reserve(text.size() + 8);
        if (data_.add_space_prefix && after_special) s += kSpaceMarker;
        for (char c : text) {
            if (c == ' ') {
                s += kSpaceMarker;
            } else {
                s += c;
            }
        }
        merge(s, out);
    }

    std::string compute_token_bytes(int32_t id) const override {
        const std::string& text = data_.tokens[id];
        if (data_.types[id] == TokenType::BYTE) {
            unsigned value = 0;
            if (text.size() == 6 && std::sscanf(text.c_str(), "<0x%02X>", &value) == 1) return std::string(1, static_cast<char>(value));
            return text;
        }
        if (is_added(id)) return text;
        std::string out;
        for (size_t pos = 0; pos < text.size();) {
            if (text.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
                out += ' ';
                pos += kSpaceMarker.size();
            } else {
                out += text[pos++];
            }
        }
        return out;
    }

private:
    void merge(const std::string& s, std::vector<int32_t>& out) const {
        struct Symbol {
            uint32_t begin, size;  // bytes of s; size 0: merged away
            int32_t prev, next;
        };
        std::vector<Symbol> symbols;
        for (size_t pos = 0; pos < s.size();) {
            const size_t start = pos;
            uint32_t cp;
            if (!utf8_next(s, pos, cp)) pos = start + 1;  // an invalid byte is a symbol of its own
            const auto n = static_cast<int32_t>(symbols.size());
            symbols.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(pos - start), n - 1, -1});
            if (n > 0) symbols[n - 1].next = n;
        }
        if (symbols.empty()) return;

        struct Candidate {
            float score;
            int32_t left;
            uint32_t size;  // bytes of the merged pair when pushed
            bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
        };
        std::priority_queue<Candidate> heap;  // highest score first, then leftmost
        auto push_pair = [&](int32_t left) {
            if (left < 0 || symbols[left].next < 0) return;
            const Symbol& a = symbols[left];
            const Symbol& b = symbols[a.next];
            const int32_t id = find_token(std::string_view(s).substr(a.begin, a.size + b.size));
            if (id < 0 || data_.types[id] == TokenType::BYTE || is_added(id)) return;
            heap.push({data_.scores[id], left, a.size + b.size});
        };
        for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

        while (!heap.empty()) {
            const Candidate c = heap.top();
            heap.pop();
            Symbol& a = symbols[c.left];
            if (a.size == 0 || a.next < 0) continue;
            Symbol& b = symbols[a.next];
            if (a.size + b.size != c.size) continue;  // a or b changed since: stale
            a.size += b.size;
            b.size = 0;
            a.next = b.next;
            if (b.next >= 0) symbols[b.next].prev = c.left;
            push_pair(a.prev);
            push_pair(c.left);
        }
        for (int32_t i = 0; i >= 0; i = symbols[i].next) {
            const std::string_view piece = std::string_view(s).substr(symbols[i].begin, symbols[i].size);
            const int32_t id = find_token(piece);
            if (id >= 0 && data_.types[id] != TokenType::BYTE) {
                out.push_back(id);
                continue;
            }
            for (char c : piece) {
                const int32_t byte_id = byte_ids_[static_cast<uint8_t>(c)];
                if (byte_id >= 0) {
                    out.push_back(byte_id);
                } else if (data_.unk_id >= 0) {
                    out.push_back(data_.unk_id);
                }
            }
        }
    }

    std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(VocabData data) {
    return std::unique_ptr<Tokenizer>(std::make_unique<SpmTokenizer>(std::move(data)));
}

}  // namespace mvllm
