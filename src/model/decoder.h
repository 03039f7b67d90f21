// The one decoder for every supported architecture (DESIGN.md decision 2): embedding, then per
// layer RMSNorm -> Q/K/V (+bias) -> RoPE -> KV write -> attention -> O + residual -> RMSNorm ->
// gate/up -> SwiGLU -> down + residual, then the final norm and the LM head on the rows that
// need logits. It runs one flat batch over a paged KV cache it does not own (decision 1).
// On a backend that fuses (CUDA) the same sequence is issued in fewer, fused ops: Q/K/V as one
// matrix followed by rope_kv_store, the residual adds folded into the O and down matmuls, gate/up
// and SwiGLU in one; and every pass is offered to the backend for recording (begin_step), so a
// decode step can replay as one CUDA graph.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace mvllm {

struct DecoderOptions {
    DType activation_dtype = DType::F32;  // F32 or F16: the inputs of every matmul
};

class Decoder {
public:
    // Uploads the model's weights to the backend. The model must outlive the decoder.
    static Result<std::unique_ptr<Decoder>> create(const Model& model, Backend& backend,
                                                    const DecoderOptions& options = {});

    const ModelConfig& config() const { return config_; }
    Backend& backend() { return backend_; }

    // The KV geometry this model needs; n_blocks and dtype are the caller's choice.
    KvCacheConfig kv_config(int64_t n_blocks, int32_t block_size, DType dtype) const;

    // Runs the batch; logits receives [batch.logit_rows.size()][n_vocab] f32.
    // Errors (never aborts) on a batch that does not fit the cache or the vocabulary, or whose
    // activations do not fit the device's memory.
    Status forward(const Batch& batch, KvCache& cache, std::vector<float>* logits);
    // Runs the batch and returns the greedy token (argmax, first index on ties) of each logit row,
    // computed on the backend (no logits copied to the host); with logprobs, also each token's
    // log-softmax (Backend::argmax_rows). picks (core/draw.h): penalties applied to the logits
    // first, and draws (empty, or one per logit row): a row whose temperature is above 0 is
    // instead drawn by the backend (core/race.h; no logprob for it); with targets (and logprobs),
    // target_logprobs receives each target token's log-softmax; *copied points at the penalised
    // logits of the rows picks.copies names, [copies][n_vocab], in the backend's memory (valid until
    // the next greedy step but one, Backend::copied_rows); *scores at the RowScores of the rows
    // picks.scores names (Backend::row_scores, as long).
    Status forward_greedy(const Batch& batch, KvCache& cache, std::vector<int32_t>* tokens,
                          std::vector<float>* logprobs = nullptr, const TokenPicks& picks = {},
                          std::vector<float>* target_logprobs = nullptr, const float** copied = nullptr,
                          const RowScore** scores = nullptr);
    // forward_greedy in two halves: queues the pass and its argmax and returns a ticket for
    // greedy_result. A batch may name a token as fed_token(r) (kv/batch.h): row r of this
    // decoder's last greedy step, which must be the backend's last argmax. A backend that
    // embeds_fed_tokens() reads it on the device, so the next step can be queued before this
    // one's tokens are known (SequenceRunner::greedy); otherwise the decoder waits for them here.
    Result<uint64_t> forward_greedy_enqueue(const Batch& batch, KvCache& cache, bool logprobs = false,
                                            const TokenPicks& picks = {});
    // forward_greedy_enqueue in two halves, so that a caller makes a step's picks while the device
    // runs its pass (the engine's penalty lists, ~0.3-1 ms for 256 penalised rows, bench/NOTES.md,
    // thirty-first session): queue_pass queues the forward of batch and keeps its logit rows on the
    // backend; queue_picks validates picks against them (picks_error), queues their picks and
    // returns the ticket for greedy_result. Nothing else may run on the decoder or its backend
    // between the two. Picks that picks_error refuses leave the pass's KV written.
    Status queue_pass(const Batch& batch, KvCache& cache);
    Result<uint64_t> queue_picks(bool logprobs, const TokenPicks& picks);
    // The tokens (and logprobs, target logprobs, copied rows and row scores, when enqueued with
    // them) of one of the last two greedy steps.
    Status greedy_result(uint64_t ticket, std::vector<int32_t>* tokens, std::vector<float>* logprobs = nullptr,
                         std::vector<float>* target_logprobs = nullptr, const float** copied = nullptr,
                         const RowScore** scores = nullptr);

private:
    Decoder(const ModelConfig& config, Backend& backend, const DecoderOptions& options)
        : config_(config), backend_(backend), options_(options) {}
    Status validate(const Batch& batch, const KvCache& cache) const;
    // The batch to run: `batch` itself, or a copy in *storage with its fed tokens replaced by
    // the last greedy step's (waited for) when the backend does not embed them on the device.
    Result<const Batch*> with_fed_tokens(const Batch& batch, Batch* storage);
    // Issues the pass (or lets the backend replay it); returns the logits [n_logit_rows][n_vocab]
    // f32 on the backend (ne[1] == 0 when the batch wants none). A backend out of device memory
    // throws DeviceOutOfMemory; forward and forward_greedy turn it into an error Status.
    TensorView run(const Batch& batch, KvCache& cache);
    // Queues the picks of the logit rows `out` (validated) and records the step under its ticket.
    Result<uint64_t> enqueue_picks(const TensorView& out, bool logprobs, const TokenPicks& picks);

    ModelConfig config_;
    Backend& backend_;
    DecoderOptions options_;
    ModelWeights weights_;        // backend-resident views
    std::vector<float> inv_freq_; // [head_dim / 2]
    // Per layer, when the backend fuses QKV: {n_embd, q_dim + 2 kv_dim} rows q, k, v (or, with V
    // apart, backend.h: rows q, k, and V as wv_) and the bias {q_dim + 2 kv_dim} f32 in the
    // stacked order (data null when the model has none).
    std::vector<TensorView> wqkv_, bqkv_, wv_;
    std::vector<std::vector<uint8_t>> fused_host_;  // host bytes of the fused tensors
    uint64_t program_id_ = 0;                       // this decoder's id for recorded steps
    // The last two greedy steps (forward_greedy_enqueue), at ticket % 2.
    struct GreedyStep {
        uint64_t ticket = 0;  // the backend's argmax ticket (0: none)
        int64_t rows = 0;
        bool logprobs = false;
        bool targets = false;
        int64_t copies = 0;  // rows copied back
        int64_t scores = 0;  // rows scored by the backend
    };
    GreedyStep greedy_[2];
    uint64_t last_greedy_ = 0;
    std::optional<TensorView> pass_rows_;  // queue_pass's logit rows, until queue_picks takes them
};

}  // namespace mvllm
