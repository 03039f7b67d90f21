// Single-sequence greedy generation on the decoder: a batch of one sequence with its own block
// table (the same path the engine uses for many). Used by the CLI tools and the golden tests.
#pragma once

#include <functional>
#include <vector>

#include "kv/block_allocator.h"
#include "model/decoder.h"

namespace mvllm {

struct GenerationTimings {
    double prefill_seconds = 0;
    double decode_seconds = 0;
    int64_t n_prompt = 0;
    int64_t n_decoded = 0;  // decode steps run (tokens generated after the first)
};

class SequenceRunner {
public:
    // prefill_chunk: prompt tokens per forward call (0: the whole prompt at once).
    SequenceRunner(Decoder& decoder, KvCache& cache, int32_t prefill_chunk = 0);
    ~SequenceRunner();

    // Runs the prompt; logits of its last position into *logits. Logits of every position when
    // all_logits (then [n_prompt][n_vocab]).
    Status prefill(const std::vector<int32_t>& prompt, std::vector<float>* logits, bool all_logits = false);
    // Appends one token and returns the logits of its position.
    Status step(int32_t token, std::vector<float>* logits);
    int64_t n_cached() const { return n_cached_; }

    // Greedy continuation of `prompt` by n tokens. on_token (optional) sees each new token.
    // Each decode step is queued before the previous step's token has reached the host (the step
    // names it as fed_token(0)): on a backend that embeds fed tokens on the device the next step
    // is already queued when one ends, elsewhere the decoder waits for the token first.
    Status greedy(const std::vector<int32_t>& prompt, int n, std::vector<int32_t>* out,
                  GenerationTimings* timings = nullptr,
                  const std::function<void(int32_t)>& on_token = nullptr);

private:
    // The batch of `tokens` appended to the sequence (its block table grown to hold them).
    Result<Batch> next_batch(const std::vector<int32_t>& tokens);
    Status run(const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>* logits);
    // Appends one token (an id, or fed_token(0)) and queues its greedy successor: the ticket.
    Result<uint64_t> enqueue_greedy(int32_t token);
    Decoder& decoder_;
    KvCache& cache_;
    BlockAllocator allocator_;
    std::vector<int32_t> block_table_;
    int64_t n_cached_ = 0;
    int32_t prefill_chunk_;
};

int32_t argmax(const float* logits, int64_t n);

}  // namespace mvllm
