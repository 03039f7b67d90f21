#include "model/decoder.h"

#include <cmath>

#include "core/progress.h"

namespace mvllm {

Result<std::unique_ptr<Decoder>> Decoder::create(const Model& model, Backend& backend,
                                                 const DecoderOptions& options) {
    if (options.activation_dtype != DType::F32 && options.activation_dtype != DType::F16)
        return make_error("activation dtype ", type_name(options.activation_dtype),
                          " is not supported (f32, f16)");
    std::unique_ptr<Decoder> d(new Decoder(model.config, backend, options));
    ModelWeights host = model.weights;
    const std::vector<WeightSlot> slots = weight_slots(d->config_, &host);
    ProgressBar progress("loading " + model.path, static_cast<int64_t>(slots.size()));
    for (const WeightSlot& slot : slots) {
        progress.advance();
        if (!slot.view->data) continue;
        MVLLM_ASSIGN_OR_RETURN(*slot.view, backend.upload_weight(*slot.view));
    }
    if (d->config_.tied_embeddings) host.output = host.token_embd;
    d->weights_ = host;
    // RoPE frequencies: from the config (incl. llama3 scaling), or divided by a GGUF rope_freqs
    // tensor, which is how GGUF files carry llama3 scaling.
    d->inv_freq_ = rope_inv_freq(d->config_);
    if (model.weights.rope_freqs.data) {
        const float* factors = model.weights.rope_freqs.as<float>();
        for (size_t i = 0; i < d->inv_freq_.size(); ++i) d->inv_freq_[i] /= factors[i];
    }
    return d;
}

KvCacheConfig Decoder::kv_config(int64_t n_blocks, int32_t block_size, DType dtype) const {
    KvCacheConfig c;
    c.n_layers = config_.n_layers;
    c.n_kv_heads = config_.n_kv_heads;
    c.head_dim = config_.head_dim;
    c.block_size = block_size;
    c.n_blocks = n_blocks;
    c.dtype = dtype;
    return c;
}

Status Decoder::validate(const Batch& b, const KvCache& cache) const {
    const KvCacheConfig& kc = cache.config();
    if (kc.n_layers != config_.n_layers || kc.n_kv_heads != config_.n_kv_heads ||
        kc.head_dim != config_.head_dim || kc.block_size != b.block_size)
        return make_error("KV cache geometry does not match the model");
    if (b.token_ids.empty()) return make_error("empty batch");
    for (int32_t id : b.token_ids)
        if (id < 0 || id >= config_.n_vocab)
            return make_error("token id ", id, " is outside the vocabulary (", config_.n_vocab, ")");
    for (int32_t block : b.block_tables)
        if (block < 0 || block >= kc.n_blocks) return make_error("block id ", block, " out of range");
    for (int32_t row : b.logit_rows)
        if (row < 0 || row >= b.n_tokens()) return make_error("logit row ", row, " out of range");
    return Status::ok();
}

Status Decoder::forward(const Batch& batch, KvCache& cache, std::vector<float>* logits) {
    MVLLM_TRY(validate(batch, cache));
    try {
        return run(batch, cache, logits);
    } catch (const DeviceOutOfMemory& e) {
        return make_error(e.what());
    }
}

Status Decoder::run(const Batch& batch, KvCache& cache, std::vector<float>* logits) {
    const ModelConfig& c = config_;
    const DType act = options_.activation_dtype;
    const int64_t n = batch.n_tokens();
    const int64_t n_logits = static_cast<int64_t>(batch.logit_rows.size());
    Backend& be = backend_;
    be.begin(batch);

    // Activations, one row per query token: [n][width].
    TensorView x = be.alloc(DType::F32, c.n_embd, n);      // the residual stream
    TensorView xn = be.alloc(act, c.n_embd, n);            // normed input of a matmul
    TensorView q = be.alloc(DType::F32, c.q_dim(), n);
    TensorView k = be.alloc(DType::F32, c.kv_dim(), n);
    TensorView v = be.alloc(DType::F32, c.kv_dim(), n);
    TensorView attn = be.alloc(act, c.q_dim(), n);
    TensorView proj = be.alloc(DType::F32, c.n_embd, n);   // O and down projections
    TensorView gate = be.alloc(DType::F32, c.n_ff, n);
    TensorView up = be.alloc(DType::F32, c.n_ff, n);
    TensorView hidden = be.alloc(act, c.n_ff, n);
    const TensorView none;
    const RopeParams rope{inv_freq_.data(), c.head_dim};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

    be.embed(weights_.token_embd, x);
    for (int32_t l = 0; l < c.n_layers; ++l) {
        const LayerWeights& w = weights_.layers[l];
        be.rms_norm(x, w.attn_norm, c.rms_norm_eps, xn);
        be.matmul(w.wq, xn, w.bq, q);
        be.matmul(w.wk, xn, w.bk, k);
        be.matmul(w.wv, xn, w.bv, v);
        be.rope(q, c.n_heads, rope);
        be.rope(k, c.n_kv_heads, rope);
        be.kv_store(cache, l, k, v);
        be.attention(cache, l, q, attn, c.n_heads, scale);
        be.matmul(w.wo, attn, none, proj);
        be.add(x, proj);

        be.rms_norm(x, w.ffn_norm, c.rms_norm_eps, xn);
        be.matmul(w.w_gate, xn, none, gate);
        be.matmul(w.w_up, xn, none, up);
        be.silu_mul(gate, up, hidden);
        be.matmul(w.w_down, hidden, none, proj);
        be.add(x, proj);
    }
    logits->clear();
    if (n_logits == 0) return Status::ok();
    TensorView last = be.alloc(DType::F32, c.n_embd, n_logits);
    TensorView last_norm = be.alloc(act, c.n_embd, n_logits);
    TensorView out = be.alloc(DType::F32, c.n_vocab, n_logits);
    be.gather_logit_rows(x, last);
    be.rms_norm(last, weights_.output_norm, c.rms_norm_eps, last_norm);
    be.matmul(weights_.output, last_norm, none, out);
    logits->resize(static_cast<size_t>(n_logits) * c.n_vocab);
    be.to_host(out, logits->data());
    return Status::ok();
}

}  // namespace mvllm
