#include "model/generate.h"

#include <chrono>

namespace mvllm {

int32_t argmax(const float* logits, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
}

SequenceRunner::SequenceRunner(Decoder& decoder, KvCache& cache, int32_t prefill_chunk)
    : decoder_(decoder), cache_(cache), allocator_(cache.config().n_blocks), prefill_chunk_(prefill_chunk) {}

SequenceRunner::~SequenceRunner() { allocator_.release(&block_table_); }

Result<Batch> SequenceRunner::next_batch(const std::vector<int32_t>& tokens) {
    const int32_t block_size = cache_.config().block_size;
    MVLLM_TRY(allocator_.grow(&block_table_, n_cached_ + static_cast<int64_t>(tokens.size()), block_size));
    Batch batch;
    batch.block_size = block_size;
    batch.add_sequence(tokens, static_cast<int32_t>(n_cached_), block_table_, true);
    return batch;
}

Status SequenceRunner::run(const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>* logits) {
    MVLLM_ASSIGN_OR_RETURN(Batch batch, next_batch(tokens));
    if (all_logits) batch.want_all_logits();
    MVLLM_TRY(decoder_.forward(batch, cache_, logits));
    n_cached_ += static_cast<int64_t>(tokens.size());
    return Status::ok();
}

Status SequenceRunner::prefill(const std::vector<int32_t>& prompt, std::vector<float>* logits, bool all_logits) {
    if (prompt.empty()) return make_error("empty prompt");
    const size_t chunk = prefill_chunk_ > 0 ? static_cast<size_t>(prefill_chunk_) : prompt.size();
    std::vector<float> part;
    logits->clear();
    for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
        const size_t end = std::min(prompt.size(), begin + chunk);
        std::vector<int32_t> tokens(prompt.begin() + begin, prompt.begin() + end);
        MVLLM_TRY(run(tokens, all_logits, &part));
        if (all_logits) logits->insert(logits->end(), part.begin(), part.end());
        else if (end == prompt.size()) *logits = part;
    }
    return Status::ok();
}

Status SequenceRunner::step(int32_t token, std::vector<float>* logits) {
    return run({token}, false, logits);
}

Result<uint64_t> SequenceRunner::enqueue_greedy(int32_t token) {
    MVLLM_ASSIGN_OR_RETURN(const Batch batch, next_batch({token}));
    MVLLM_ASSIGN_OR_RETURN(const uint64_t ticket, decoder_.forward_greedy_enqueue(batch, cache_));
    n_cached_ += 1;
    return ticket;
}

Status SequenceRunner::greedy(const std::vector<int32_t>& prompt, int n, std::vector<int32_t>* out,
                              GenerationTimings* timings, const std::function<void(int32_t)>& on_token) {
    using clock = std::chrono::steady_clock;
    const int64_t n_vocab = decoder_.config().n_vocab;
    std::vector<float> logits;
    out->clear();
    auto t0 = clock::now();
    MVLLM_TRY(prefill(prompt, &logits));
    auto t1 = clock::now();
    // Token i comes from step i (step 0: the prefill). Step i + 1 is queued, its token fed from
    // step i, before step i's token is read.
    std::vector<int32_t> tokens{n > 0 ? argmax(logits.data(), n_vocab) : 0};
    uint64_t pending = 0;  // the ticket of step i (i >= 1)
    for (int i = 0; i < n; ++i) {
        uint64_t queued = 0;
        if (i + 1 < n) {
            MVLLM_ASSIGN_OR_RETURN(queued, enqueue_greedy(i == 0 ? tokens[0] : fed_token(0)));
        }
        if (i > 0) MVLLM_TRY(decoder_.greedy_result(pending, &tokens));
        out->push_back(tokens.at(0));
        if (on_token) on_token(tokens[0]);
        pending = queued;
    }
    auto t2 = clock::now();
    if (timings) {
        timings->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
        timings->decode_seconds = std::chrono::duration<double>(t2 - t1).count();
        timings->n_prompt = static_cast<int64_t>(prompt.size());
        timings->n_decoded = n > 0 ? n - 1 : 0;
    }
    return Status::ok();
}

}  // namespace mvllm
