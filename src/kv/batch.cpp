#include "kv/batch.h"

#include "core/status.h"

namespace mvllm {

int Batch::add_sequence(const std::vector<int32_t>& tokens, int32_t start_pos,
                        const std::vector<int32_t>& table, bool want_logits) {
    MVLLM_CHECK(!tokens.empty());
    BatchSequence s;
    s.token_begin = n_tokens();
    s.n_tokens = static_cast<int32_t>(tokens.size());
    s.context_len = start_pos + s.n_tokens;
    s.block_table_begin = static_cast<int32_t>(block_tables.size());
    s.n_blocks = static_cast<int32_t>(table.size());
    MVLLM_CHECK(static_cast<int64_t>(s.n_blocks) * block_size >= s.context_len)
        << "block table of " << s.n_blocks << " blocks for " << s.context_len << " tokens";
    for (int32_t i = 0; i < s.n_tokens; ++i) {
        const int32_t pos = start_pos + i;
        token_ids.push_back(tokens[i]);
        positions.push_back(pos);
        slot_mapping.push_back(static_cast<int64_t>(table[pos / block_size]) * block_size +
                               pos % block_size);
    }
    block_tables.insert(block_tables.end(), table.begin(), table.end());
    seqs.push_back(s);
    if (want_logits) logit_rows.push_back(s.token_begin + s.n_tokens - 1);
    return static_cast<int>(seqs.size()) - 1;
}

void Batch::want_last_logits(int seq, int32_t n) {
    const BatchSequence& s = seqs.at(static_cast<size_t>(seq));
    MVLLM_CHECK(n >= 0 && n <= s.n_tokens) << n << " logit rows of a sequence of " << s.n_tokens << " rows";
    for (int32_t i = s.n_tokens - n; i < s.n_tokens; ++i) logit_rows.push_back(s.token_begin + i);
}

void Batch::want_all_logits() {
    logit_rows.clear();
    for (int32_t i = 0; i < n_tokens(); ++i) logit_rows.push_back(i);
}

}  // namespace mvllm
