// Byte-level BPE (GPT-2, Llama 3, Qwen2).
//
// encode: the pre-tokenizer cuts the text into words; each word's bytes start as one symbol per
// byte (the token of its byte-level character), then the adjacent pair with the lowest merge rank
// is merged until no pair has a merge. Symbols form a linked list inside a small vector and
// candidate pairs wait in a min-heap keyed by (rank, position); a popped candidate whose symbols
// have changed since it was pushed is stale and dropped. Words seen before come from a cache.
#include <mutex>
#include <queue>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace mvllm {
namespace {

class BpeTokenizer final : public VocabTokenizer {
public:
    explicit BpeTokenizer(VocabData data) : VocabTokenizer(std::move(data)) {}

    Status init() {
        std::string pattern = data_.pre_pattern;
        if (pattern.empty()) {
            const char* p = pre_pattern_for_name(data_.pre);
            if (!p) return make_error("unknown pre-tokenizer '", data_.pre, "' (tokenizer.ggml.pre); known: gpt2, llama-bpe, qwen2, default");
            pattern = p;
        }
        MVLLM_ASSIGN_OR_RETURN(pre_, PreTokenizer::create(pattern));
        data_.pre_pattern = pattern;

        for (int b = 0; b < 256; ++b) {
            byte_ids_[b] = find_token(byte_to_unicode(static_cast<uint8_t>(b)));
        }
        merges_.reserve(data_.merges.size());
        for (size_t rank = 0; rank < data_.merges.size(); ++rank) {
            const std::string& m = data_.merges[rank];
            const size_t space = m.find(' ', 1);
            if (space == std::string::npos) return make_error("merge ", rank, " ('", m, "') is not 'left right'");
            const int32_t left = find_token(std::string_view(m).substr(0, space));
            const int32_t right = find_token(std::string_view(m).substr(space + 1));
            const int32_t merged = find_token(m.substr(0, space) + m.substr(space + 1));
            if (left < 0 || right < 0 || merged < 0) continue;  // a merge outside the vocabulary never applies
            merges_.emplace(pair_key(left, right), Merge{static_cast<int32_t>(rank), merged});
        }
        init_bytes();
        return Status::ok();
    }

protected:
    void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
        thread_local std::vector<std::string_view> words;
        words.clear();
        pre_->split(text, words);
        for (std::string_view word : words) encode_word(word, out);
    }

    std::string compute_token_bytes(int32_t id) const override {
        return is_added(id) ? data_.tokens[id] : byte_level_to_bytes(data_.tokens[id]);
    }

private:
    struct Merge {
        int32_t rank;
        int32_t merged;
    };
    static uint64_t pair_key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }
    const Merge* find_merge(int32_t left, int32_t right) const {
        auto it = merges_.find(pair_key(left, right));
        return it == merges_.end() ? nullptr : &it->second;
    }

    void encode_word(std::string_view word, std::vector<int32_t>& out) const {
        {
            std::lock_guard<std::mutex> lock(cache_mutex_);
            auto it = cache_.find(std::string(word));
            if (it != cache_.end()) {
                out.insert(out.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        std::vector<int32_t> ids;
        merge_word(word, ids);
        out.insert(out.end(), ids.begin(), ids.end());
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (cache_.size() >= kCacheLimit) cache_.clear();
        cache_.emplace(std::string(word), std::move(ids));
    }

    void merge_word(std::string_view word, std::vector<int32_t>& ids) const {
        if (data_.ignore_merges) {
            const int32_t id = find_token(bytes_to_byte_level(word));
            if (id >= 0) {
                ids.push_back(id);
                return;
            }
        }
        struct Symbol {
            int32_t id;
            int32_t prev, next;  // -1 at the ends
        };
        std::vector<Symbol> symbols;
        symbols.reserve(word.size());
        for (size_t i = 0; i < word.size(); ++i) {
            const int32_t id = byte_ids_[static_cast<uint8_t>(word[i])];
            if (id < 0) continue;  // a byte the vocabulary cannot spell is dropped
            const auto n = static_cast<int32_t>(symbols.size());
            symbols.push_back({id, n - 1, -1});
            if (n > 0) symbols[n - 1].next = n;
        }
        if (symbols.empty()) return;

        struct Candidate {
            int32_t rank, left, left_id, right_id;
            bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
        };
        std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
        auto push_pair = [&](int32_t left) {
            if (left < 0) return;
            const int32_t right = symbols[left].next;
            if (right < 0) return;
            if (const Merge* m = find_merge(symbols[left].id, symbols[right].id))
                heap.push({m->rank, left, symbols[left].id, symbols[right].id});
        };
        for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

        while (!heap.empty()) {
            const Candidate c = heap.top();
            heap.pop();
            Symbol& left = symbols[c.left];
            if (left.id != c.left_id || left.next < 0) continue;  // stale
            Symbol& right = symbols[left.next];
            if (right.id != c.right_id) continue;  // stale
            left.id = find_merge(c.left_id, c.right_id)->merged;
            right.id = -1;  // dead
            left.next = right.next;
            if (right.next >= 0) symbols[right.next].prev = c.left;
            push_pair(left.prev);
            push_pair(c.left);
        }
        for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
    }

    static constexpr size_t kCacheLimit = 1 << 16;
    std::unique_ptr<PreTokenizer> pre_;
    std::array<int32_t, 256> byte_ids_{};
    std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // word -> ids
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(VocabData data) {
    auto tok = std::make_unique<BpeTokenizer>(std::move(data));
    MVLLM_TRY(tok->init());
    return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace mvllm
