#include "model/decoder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/progress.h"

namespace mvllm {
namespace {

// Rows of wq, wk (and wv, where it has their type; else "V apart", backend.h) stacked into one host
// matrix, and their biases (zeros where absent).
bool can_fuse_qkv(const LayerWeights& w, const Backend& backend) {
    return w.wq.type == w.wk.type && (w.wv.type == w.wq.type || backend.fuses_qkv_v_apart()) &&
           w.wq.ne[0] == w.wk.ne[0] && w.wq.ne[0] == w.wv.ne[0] && w.wq.data && w.wk.data && w.wv.data;
}

TensorView stack_rows(const std::vector<const TensorView*>& parts, std::vector<uint8_t>* bytes) {
    TensorView out = *parts[0];
    out.ne[1] = 0;
    size_t total = 0;
    for (const TensorView* p : parts) {
        out.ne[1] += p->ne[1];
        total += p->n_bytes();
    }
    bytes->resize(total);
    size_t off = 0;
    for (const TensorView* p : parts) {
        std::memcpy(bytes->data() + off, p->data, p->n_bytes());
        off += p->n_bytes();
    }
    out.data = bytes->data();
    return out;
}

TensorView stack_bias(const LayerWeights& w, std::vector<uint8_t>* bytes) {
    const int64_t n = w.wq.ne[1] + w.wk.ne[1] + w.wv.ne[1];
    bytes->assign(static_cast<size_t>(n) * sizeof(float), 0);
    auto* dst = reinterpret_cast<float*>(bytes->data());
    int64_t off = 0;
    for (const auto& [bias, rows] : {std::pair{&w.bq, w.wq.ne[1]}, {&w.bk, w.wk.ne[1]}, {&w.bv, w.wv.ne[1]}}) {
        if (bias->data) std::memcpy(dst + off, bias->data, static_cast<size_t>(rows) * sizeof(float));
        off += rows;
    }
    TensorView out;
    out.type = DType::F32;
    out.ne = {n, 1, 1, 1};
    out.data = bytes->data();
    return out;
}

// The fused QKV order of Backend::fuses_qkv: within each head of the q and k parts (the first
// n_qk_rows rows), row 2i takes dim i and row 2i + 1 dim i + head_dim / 2; v rows stay. `row_bytes`
// per row (a quantised row is a whole number of blocks, so rows move as bytes).
void pair_rope_rows(uint8_t* data, int64_t n_qk_rows, int32_t head_dim, size_t row_bytes) {
    std::vector<uint8_t> head(static_cast<size_t>(head_dim) * row_bytes);
    const int32_t half = head_dim / 2;
    for (int64_t h0 = 0; h0 < n_qk_rows; h0 += head_dim) {
        uint8_t* base = data + static_cast<size_t>(h0) * row_bytes;
        std::memcpy(head.data(), base, head.size());
        for (int32_t i = 0; i < half; ++i) {
            std::memcpy(base + (2 * i) * row_bytes, head.data() + i * row_bytes, row_bytes);
            std::memcpy(base + (2 * i + 1) * row_bytes, head.data() + (i + half) * row_bytes, row_bytes);
        }
    }
}

std::atomic<uint64_t> g_next_program{1};

}  // namespace

Result<std::unique_ptr<Decoder>> Decoder::create(const Model& model, Backend& backend,
                                                 const DecoderOptions& options) {
    if (options.activation_dtype != DType::F32 && options.activation_dtype != DType::F16)
        return make_error("activation dtype ", type_name(options.activation_dtype),
                          " is not supported (f32, f16)");
    std::unique_ptr<Decoder> d(new Decoder(model.config, backend, options));
    d->program_id_ = g_next_program.fetch_add(1);
    ModelWeights host = model.weights;
    // Fused QKV: stacked on the host and uploaded once; the separate matrices are not uploaded (but a
    // V of another type than Q and K, uploaded as it is: a Q4_K_M file's Q6_K V).
    bool fuse = backend.fuses_qkv();
    for (const LayerWeights& w : host.layers) fuse = fuse && can_fuse_qkv(w, backend);
    std::vector<bool> v_apart;
    if (fuse) {
        for (LayerWeights& w : host.layers) {
            const bool has_bias = w.bq.data || w.bk.data || w.bv.data;
            v_apart.push_back(w.wv.type != w.wq.type);
            d->fused_host_.emplace_back();
            TensorView wqkv = v_apart.back() ? stack_rows({&w.wq, &w.wk}, &d->fused_host_.back())
                                             : stack_rows({&w.wq, &w.wk, &w.wv}, &d->fused_host_.back());
            const int64_t n_qk_rows = w.wq.ne[1] + w.wk.ne[1];
            pair_rope_rows(d->fused_host_.back().data(), n_qk_rows, d->config_.head_dim, wqkv.n_bytes() / wqkv.ne[1]);
            MVLLM_ASSIGN_OR_RETURN(wqkv, backend.upload_weight(wqkv));
            d->wqkv_.push_back(wqkv);
            TensorView bqkv;
            if (has_bias) {
                d->fused_host_.emplace_back();
                TensorView b = stack_bias(w, &d->fused_host_.back());
                pair_rope_rows(d->fused_host_.back().data(), w.wq.ne[1] + w.wk.ne[1], d->config_.head_dim, sizeof(float));
                MVLLM_ASSIGN_OR_RETURN(bqkv, backend.upload_weight(b));
            }
            d->bqkv_.push_back(bqkv);
            for (TensorView* t : {&w.wq, &w.wk, &w.bq, &w.bk, &w.bv}) t->data = nullptr;
            if (!v_apart.back()) w.wv.data = nullptr;
        }
    }
    const std::vector<WeightSlot> slots = weight_slots(d->config_, &host);
    ProgressBar progress("loading " + model.path, static_cast<int64_t>(slots.size()));
    for (const WeightSlot& slot : slots) {
        progress.advance();
        if (!slot.view->data) continue;
        MVLLM_ASSIGN_OR_RETURN(*slot.view, backend.upload_weight(*slot.view));
    }
    if (d->config_.tied_embeddings) host.output = host.token_embd;
    for (size_t l = 0; l < v_apart.size(); ++l) d->wv_.push_back(v_apart[l] ? host.layers[l].wv : TensorView{});
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
    for (int32_t id : b.token_ids) {
        if (is_fed_token(id)) {
            if (last_greedy_ == 0 || last_greedy_ != backend_.last_argmax_ticket())
                return make_error("a fed token without a greedy step of this decoder before it");
            if (fed_token_row(id) >= greedy_[last_greedy_ % 2].rows)
                return make_error("fed token of row ", fed_token_row(id), " from a greedy step of ",
                                  greedy_[last_greedy_ % 2].rows, " rows");
        } else if (id >= config_.n_vocab) {
            return make_error("token id ", id, " is outside the vocabulary (", config_.n_vocab, ")");
        }
    }
    for (int32_t block : b.block_tables)
        if (block < 0 || block >= kc.n_blocks) return make_error("block id ", block, " out of range");
    for (int32_t row : b.logit_rows)
        if (row < 0 || row >= b.n_tokens()) return make_error("logit row ", row, " out of range");
    return Status::ok();
}

Result<const Batch*> Decoder::with_fed_tokens(const Batch& batch, Batch* storage) {
    const bool fed = std::any_of(batch.token_ids.begin(), batch.token_ids.end(), is_fed_token);
    if (!fed || backend_.embeds_fed_tokens()) return &batch;
    std::vector<int32_t> last;
    MVLLM_TRY(greedy_result(last_greedy_, &last));
    *storage = batch;
    for (int32_t& id : storage->token_ids)
        if (is_fed_token(id)) id = last[static_cast<size_t>(fed_token_row(id))];
    return static_cast<const Batch*>(storage);
}

Status Decoder::forward(const Batch& batch, KvCache& cache, std::vector<float>* logits) {
    MVLLM_TRY(validate(batch, cache));
    Batch storage;
    MVLLM_ASSIGN_OR_RETURN(const Batch* b, with_fed_tokens(batch, &storage));
    try {
        const TensorView out = run(*b, cache);
        logits->resize(static_cast<size_t>(out.n_elements()));
        if (out.ne[1] > 0) backend_.to_host(out, logits->data());
    } catch (const DeviceOutOfMemory& e) {
        return make_error(e.what());
    }
    return Status::ok();
}

Status Decoder::forward_greedy(const Batch& batch, KvCache& cache, std::vector<int32_t>* tokens,
                               std::vector<float>* logprobs, const TokenPicks& picks,
                               std::vector<float>* target_logprobs, const float** copied, const RowScore** scores) {
    MVLLM_ASSIGN_OR_RETURN(const uint64_t ticket, forward_greedy_enqueue(batch, cache, logprobs != nullptr, picks));
    return greedy_result(ticket, tokens, logprobs, target_logprobs, copied, scores);
}

Result<uint64_t> Decoder::forward_greedy_enqueue(const Batch& batch, KvCache& cache, bool logprobs,
                                                 const TokenPicks& picks) {
    const int64_t n_rows = static_cast<int64_t>(batch.logit_rows.size());
    if (const std::string why = picks_error(picks, n_rows, config_.n_vocab, logprobs); !why.empty())
        return make_error(why);  // before the pass: refused picks leave the cache as it was
    MVLLM_TRY(queue_pass(batch, cache));
    const TensorView out = *pass_rows_;
    pass_rows_.reset();
    return enqueue_picks(out, logprobs, picks);
}

Status Decoder::queue_pass(const Batch& batch, KvCache& cache) {
    pass_rows_.reset();
    MVLLM_TRY(validate(batch, cache));
    Batch storage;
    MVLLM_ASSIGN_OR_RETURN(const Batch* b, with_fed_tokens(batch, &storage));
    try {
        pass_rows_ = run(*b, cache);
    } catch (const DeviceOutOfMemory& e) {
        return make_error(e.what());
    }
    return Status::ok();
}

Result<uint64_t> Decoder::queue_picks(bool logprobs, const TokenPicks& picks) {
    if (!pass_rows_) return make_error("no pass is queued for these picks (queue_pass)");
    const TensorView out = *pass_rows_;
    pass_rows_.reset();
    if (const std::string why = picks_error(picks, out.ne[1], config_.n_vocab, logprobs); !why.empty())
        return make_error(why);
    return enqueue_picks(out, logprobs, picks);
}

Result<uint64_t> Decoder::enqueue_picks(const TensorView& out, bool logprobs, const TokenPicks& picks) {
    try {
        const uint64_t ticket = backend_.argmax_enqueue(out, logprobs, picks);
        greedy_[ticket % 2] = {ticket, out.ne[1], logprobs, !picks.targets.empty(),
                               static_cast<int64_t>(picks.copies.size()), static_cast<int64_t>(picks.scores.size())};
        last_greedy_ = ticket;
        return ticket;
    } catch (const DeviceOutOfMemory& e) {
        return make_error(e.what());
    }
}

Status Decoder::greedy_result(uint64_t ticket, std::vector<int32_t>* tokens, std::vector<float>* logprobs,
                              std::vector<float>* target_logprobs, const float** copied, const RowScore** scores) {
    const GreedyStep& g = greedy_[ticket % 2];
    if (ticket == 0 || g.ticket != ticket || ticket + 1 < backend_.last_argmax_ticket())
        return make_error("greedy step ", ticket, " is not kept (the backend keeps its last two)");
    if (logprobs && !g.logprobs) return make_error("greedy step ", ticket, " was queued without logprobs");
    if (target_logprobs && !g.targets) return make_error("greedy step ", ticket, " was queued without targets");
    tokens->resize(static_cast<size_t>(g.rows));
    if (logprobs) logprobs->resize(tokens->size());
    if (target_logprobs) target_logprobs->resize(tokens->size());
    if (copied && g.copies == 0) return make_error("greedy step ", ticket, " was queued without copied rows");
    if (scores && g.scores == 0) return make_error("greedy step ", ticket, " was queued without scored rows");
    if (g.rows > 0)
        backend_.argmax_result(ticket, tokens->data(), logprobs ? logprobs->data() : nullptr,
                               target_logprobs ? target_logprobs->data() : nullptr);
    if (copied) *copied = backend_.copied_rows(ticket);
    if (scores) *scores = backend_.row_scores(ticket);
    return Status::ok();
}

TensorView Decoder::run(const Batch& batch, KvCache& cache) {
    const ModelConfig& c = config_;
    const DType act = options_.activation_dtype;
    const int64_t n = batch.n_tokens();
    const int64_t n_logits = static_cast<int64_t>(batch.logit_rows.size());
    const bool fused_qkv = !wqkv_.empty();
    Backend& be = backend_;
    // A replayed step: the same allocations, no ops (the backend runs its recording at end_step).
    const bool replay = be.begin_step(batch, program_id_, cache);

    // Activations, one row per query token: [n][width].
    TensorView x = be.alloc(DType::F32, c.n_embd, n);      // the residual stream
    TensorView xn = be.alloc(act, c.n_embd, n);            // normed input of a matmul
    TensorView q = be.alloc(DType::F32, c.q_dim(), n);
    TensorView k = fused_qkv ? TensorView{} : be.alloc(DType::F32, c.kv_dim(), n);
    TensorView v = fused_qkv ? TensorView{} : be.alloc(DType::F32, c.kv_dim(), n);
    TensorView qkv = fused_qkv ? be.alloc(DType::F32, c.q_dim() + 2 * c.kv_dim(), n) : TensorView{};
    TensorView attn = be.alloc(act, c.q_dim(), n);
    TensorView proj = be.alloc(DType::F32, c.n_embd, n);   // O and down projections (unfused backends)
    TensorView gate_up = be.alloc(DType::F32, 2 * c.n_ff, n);  // scratch of matmul_swiglu
    TensorView hidden = be.alloc(act, c.n_ff, n);
    TensorView last = be.alloc(DType::F32, c.n_embd, n_logits);
    TensorView last_norm = be.alloc(act, c.n_embd, n_logits);
    TensorView out = be.alloc(DType::F32, c.n_vocab, n_logits);
    const TensorView none;
    const RopeParams rope{inv_freq_.data(), c.head_dim};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

    if (!replay) {
        be.embed(weights_.token_embd, x);
        for (int32_t l = 0; l < c.n_layers; ++l) {
            const LayerWeights& w = weights_.layers[l];
            be.rms_norm(x, w.attn_norm, c.rms_norm_eps, xn);
            if (fused_qkv) {
                be.matmul_rope_attention(wqkv_[l], wv_[l], xn, bqkv_[l], qkv, c.n_heads, c.n_kv_heads, rope, q, cache, l, attn,
                                         scale);
            } else {
                be.matmul(w.wq, xn, w.bq, q);
                be.matmul(w.wk, xn, w.bk, k);
                be.matmul(w.wv, xn, w.bv, v);
                be.rope_qk_kv_store(q, k, v, c.n_heads, c.n_kv_heads, rope, cache, l);
                be.attention(cache, l, q, attn, c.n_heads, scale);
            }
            be.matmul_add(w.wo, attn, x, proj);

            be.rms_norm(x, w.ffn_norm, c.rms_norm_eps, xn);
            be.matmul_swiglu(w.w_gate, w.w_up, xn, hidden, gate_up);
            be.matmul_add(w.w_down, hidden, x, proj);
        }
        if (n_logits > 0) {
            be.gather_logit_rows(x, last);
            be.rms_norm(last, weights_.output_norm, c.rms_norm_eps, last_norm);
            be.matmul(weights_.output, last_norm, none, out);
        }
    }
    be.end_step();
    return out;
}

}  // namespace mvllm
