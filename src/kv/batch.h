// The batch metadata of one forward call: one flat list of query tokens from several sequences,
// each sequence with its own block table over the paged KV cache (DESIGN.md decision 1). Built once
// per step on the host; the decoder and the kernels only read it.
//
// Query token i of sequence s sits at position positions[i] and attends to cache positions
// 0..positions[i] of s (causal). The tokens of one sequence are consecutive rows and consecutive
// positions; the last one is context_len - 1. Its K/V are written to slot slot_mapping[i] =
// block_id * block_size + offset_in_block before attention runs.
#pragma once

#include <cstdint>
#include <vector>

namespace mvllm {

// A token id the host does not know yet: row `row` of the last greedy step's tokens
// (Decoder::forward_greedy_enqueue), so that a decode step can be queued before the previous
// one's token has reached the host. Negative, so it never collides with a vocabulary id.
constexpr int32_t fed_token(int32_t row) { return -1 - row; }
constexpr bool is_fed_token(int32_t id) { return id < 0; }
constexpr int32_t fed_token_row(int32_t id) { return -1 - id; }

struct BatchSequence {
    int32_t token_begin = 0;        // first row of this sequence in the flat batch
    int32_t n_tokens = 0;           // query rows of this sequence
    int32_t context_len = 0;        // cached tokens after this step (incl. the new ones)
    int32_t block_table_begin = 0;  // offset into Batch::block_tables
    int32_t n_blocks = 0;           // blocks in its table (>= ceil(context_len / block_size))
};

struct Batch {
    int32_t block_size = 16;
    std::vector<int32_t> token_ids;     // [n_tokens] vocabulary ids, or fed_token(r)
    std::vector<int32_t> positions;     // [n_tokens]
    std::vector<int64_t> slot_mapping;  // [n_tokens]
    std::vector<int32_t> block_tables;  // [sum of n_blocks] block ids
    std::vector<BatchSequence> seqs;    // [n_seqs]
    std::vector<int32_t> logit_rows;    // rows whose logits forward returns, in this order

    int32_t n_tokens() const { return static_cast<int32_t>(token_ids.size()); }
    const int32_t* block_table(const BatchSequence& s) const {
        return block_tables.data() + s.block_table_begin;
    }

    // Appends a sequence: its new tokens start at position `start_pos`, its block table covers
    // them. Returns the index of the sequence. If want_logits, the last row is added to logit_rows.
    int add_sequence(const std::vector<int32_t>& tokens, int32_t start_pos,
                     const std::vector<int32_t>& table, bool want_logits);
    // Requests logits for the last n rows of sequence `seq` (speculative verification: one row
    // per drafted position plus one), appended to logit_rows in position order.
    void want_last_logits(int seq, int32_t n);
    // Requests logits for every row (golden tests compare all positions).
    void want_all_logits();
};

}  // namespace mvllm
