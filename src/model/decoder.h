// The one decoder for every supported architecture (DESIGN.md decision 2): embedding, then per
// layer RMSNorm -> Q/K/V (+bias) -> RoPE -> KV write -> attention -> O + residual -> RMSNorm ->
// gate/up -> SwiGLU -> down + residual, then the final norm and the LM head on the rows that
// need logits. It runs one flat batch over a paged KV cache it does not own (decision 1).
#pragma once

#include <memory>
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

private:
    Decoder(const ModelConfig& config, Backend& backend, const DecoderOptions& options)
        : config_(config), backend_(backend), options_(options) {}
    Status validate(const Batch& batch, const KvCache& cache) const;
    Status run(const Batch& batch, KvCache& cache, std::vector<float>* logits);  // forward's body

    ModelConfig config_;
    Backend& backend_;
    DecoderOptions options_;
    ModelWeights weights_;        // backend-resident views
    std::vector<float> inv_freq_; // [head_dim / 2]
};

}  // namespace mvllm
