// The operations the one decoder needs, implemented once per backend (CPU now, CUDA later).
// Tensors are views into memory the backend owns: weights uploaded once, activations allocated
// from a per-forward arena. The decoder calls these in order; a backend may run them eagerly
// (CPU) or record them (a CUDA graph).
//
// Activation tensors have ne = {width, n_rows}: one row per query token of the flat batch.
#pragma once

#include <algorithm>
#include <cmath>
#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/draw.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kv/batch.h"
#include "kv/kv_cache.h"

namespace mvllm {

// Memory of the device a backend allocates from.
struct DeviceMemory {
    size_t free = 0;   // bytes that can still be allocated
    size_t total = 0;  // bytes the device has
};

struct RopeParams {
    const float* inv_freq = nullptr;  // [head_dim / 2] f32, host
    int32_t head_dim = 0;
};

// Thrown by a device backend when the memory of a forward pass (activations, attention scratch)
// cannot be allocated: the message says what did not fit and how much was free. Decoder::forward
// turns it into an error Status for the batch; nothing aborts.
class DeviceOutOfMemory : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;

    // Makes a weight usable by this backend (CPU: the host view itself, no copy).
    virtual Result<TensorView> upload_weight(const TensorView& host) = 0;
    // Free and total memory of the device (CPU: MemAvailable / MemTotal of /proc/meminfo; CUDA:
    // cudaMemGetInfo). Sizes the KV pool from a fraction of what is free.
    virtual Result<DeviceMemory> memory_info() const = 0;
    // The paged KV storage of this backend for a geometry.
    virtual Result<std::unique_ptr<KvCache>> create_kv_cache(const KvCacheConfig& config) = 0;

    // Starts a forward pass: resets the activation arena and takes the batch metadata.
    virtual void begin(const Batch& batch) = 0;
    // An activation tensor valid until the next begin(): ne = {width, n_rows}.
    virtual TensorView alloc(DType type, int64_t width, int64_t n_rows) = 0;

    // out[i] = table[batch.token_ids[i]] (dequantised).
    virtual void embed(const TensorView& table, const TensorView& out) = 0;
    // out = x / rms(x) * weight, per row.
    virtual void rms_norm(const TensorView& x, const TensorView& weight, float eps,
                          const TensorView& out) = 0;
    // out[n][o] = sum_i x[n][i] * w[o][i]  (+ bias[o] when bias.data).
    virtual void matmul(const TensorView& w, const TensorView& x, const TensorView& bias,
                        const TensorView& out) = 0;
    // Rotates each head of x (ne = {n_heads * head_dim, n_rows}) by its row's batch position,
    // half-split (NeoX / Hugging Face) pairing.
    virtual void rope(const TensorView& x, int32_t n_heads, const RopeParams& rope) = 0;
    // Writes K/V rows into the cache slots of the batch.
    virtual void kv_store(KvCache& cache, int32_t layer, const TensorView& k, const TensorView& v) = 0;
    // out = softmax(q K^T * scale) V over each row's sequence in the cache (causal).
    virtual void attention(KvCache& cache, int32_t layer, const TensorView& q, const TensorView& out,
                           int32_t n_heads, float scale) = 0;
    // out = silu(gate) * up.
    virtual void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) = 0;
    // acc += x.
    virtual void add(const TensorView& acc, const TensorView& x) = 0;
    // out[j] = x[rows[j]] for the batch's logit_rows.
    virtual void gather_logit_rows(const TensorView& x, const TensorView& out) = 0;
    // Copies an F32 tensor to host memory.
    virtual void to_host(const TensorView& x, float* dst) = 0;

    // ---- Fused forms: a backend overrides them where it can fuse; the defaults compose the ops
    // above. `scratch` tensors ([n_rows][n_out] f32) serve only the defaults.

    // acc += W x (the residual add folded into the matmul).
    virtual void matmul_add(const TensorView& w, const TensorView& x, const TensorView& acc,
                            const TensorView& scratch) {
        matmul(w, x, TensorView{}, scratch);
        add(acc, scratch);
    }
    // out = silu(W_gate x) * (W_up x). scratch: f32 with room for [n_rows][2 * n_ff] (the default
    // uses its halves as the gate and up products; a backend may use it as one stacked product).
    virtual void matmul_swiglu(const TensorView& w_gate, const TensorView& w_up, const TensorView& x,
                               const TensorView& out, const TensorView& scratch) {
        TensorView gate = scratch;
        gate.type = DType::F32;
        gate.ne = {w_gate.ne[1], x.ne[1], 1, 1};
        TensorView up = gate;
        up.data = static_cast<float*>(scratch.data) + gate.n_elements();
        matmul(w_gate, x, TensorView{}, gate);
        matmul(w_up, x, TensorView{}, up);
        silu_mul(gate, up, out);
    }
    // q = RoPE(q) in place, RoPE(k) and v into the cache slots of the batch: the RoPE and K/V store
    // of unfused projections (e.g. a Q4_K_M file's Q6_K V beside Q4_K Q and K). The default rotates
    // k in place and stores it; a backend that fuses the steps may leave k as it was.
    virtual void rope_qk_kv_store(const TensorView& q, const TensorView& k, const TensorView& v, int32_t n_heads,
                                  int32_t n_kv_heads, const RopeParams& rope, KvCache& cache, int32_t layer) {
        this->rope(q, n_heads, rope);
        this->rope(k, n_kv_heads, rope);
        kv_store(cache, layer, k, v);
    }
    // True when the backend wants Q, K and V as one matrix (rows q, then k, then v; the q and k
    // rows of each head in RoPE pairs: row 2i is dim i, row 2i + 1 dim i + head_dim / 2) followed
    // by rope_kv_store instead of three matmuls, two RoPEs and kv_store. Where V's weight type
    // differs from Q and K's (a Q4_K_M file's Q6_K V), only q and k are stacked (wqkv) and V
    // stays a matrix of its own (wv; "V apart"); an empty wv means wqkv holds the v rows too.
    virtual bool fuses_qkv() const { return false; }
    // Whether a backend that fuses QKV also takes V apart (else such a file's layers stay unfused).
    virtual bool fuses_qkv_v_apart() const { return fuses_qkv(); }
    // The two planes of qkv with V apart: wqkv x ([n_rows][q_dim + kv_dim]), then wv x ([n_rows][kv_dim]).
    static std::pair<TensorView, TensorView> qkv_planes(const TensorView& qkv, const TensorView& wqkv,
                                                        const TensorView& wv, const TensorView& x) {
        TensorView qk = qkv, v = qkv;
        qk.ne = {wqkv.ne[1], x.ne[1], 1, 1};
        v.ne = {wv.ne[1], x.ne[1], 1, 1};
        v.data = static_cast<float*>(qkv.data) + qk.n_elements();
        MVLLM_CHECK(qkv.type == DType::F32 && qk.ne[0] + v.ne[0] == qkv.ne[0] && qkv.ne[1] == x.ne[1]) << "qkv planes";
        return {qk, v};
    }
    // qkv = the fused QKV rows of x ([n_rows][q_dim + 2 kv_dim] f32): wqkv x, or with V apart the
    // planes wqkv x ([n_rows][q_dim + kv_dim]) then wv x ([n_rows][kv_dim]) in the same buffer.
    virtual void matmul_qkv(const TensorView& wqkv, const TensorView& wv, const TensorView& x, const TensorView& qkv) {
        if (!wv.data) {
            matmul(wqkv, x, TensorView{}, qkv);
            return;
        }
        const auto [qk, v] = qkv_planes(qkv, wqkv, wv, x);
        matmul(wqkv, x, TensorView{}, qk);
        matmul(wv, x, TensorView{}, v);
    }
    // From qkv (matmul_qkv's rows; v_apart: the two planes) plus bias ([q_dim + 2 kv_dim] f32 in
    // the stacked order, or none: the QKV bias added here, not by the matmul): q = RoPE(q part)
    // into q [n_rows][q_dim] f32 in head-dim order, and RoPE(k part), v part written into the cache
    // slots of the batch. Only when fuses_qkv().
    virtual void rope_kv_store(const TensorView& qkv, const TensorView& bias, int32_t n_heads, int32_t n_kv_heads,
                               const RopeParams& rope, const TensorView& q, KvCache& cache, int32_t layer,
                               bool v_apart) {
        (void)qkv, (void)bias, (void)n_heads, (void)n_kv_heads, (void)rope, (void)q, (void)cache, (void)layer,
            (void)v_apart;
        MVLLM_CHECK(false) << name() << " does not fuse QKV";
    }
    // matmul_qkv, then rope_kv_store (qkv: scratch of [n_rows][q_dim + 2 kv_dim] f32). A backend
    // may do both in one kernel (and then need not write qkv). Only when fuses_qkv().
    virtual void matmul_rope_kv_store(const TensorView& wqkv, const TensorView& wv, const TensorView& x,
                                      const TensorView& bias, const TensorView& qkv, int32_t n_heads,
                                      int32_t n_kv_heads, const RopeParams& rope, const TensorView& q, KvCache& cache,
                                      int32_t layer) {
        matmul_qkv(wqkv, wv, x, qkv);
        rope_kv_store(qkv, bias, n_heads, n_kv_heads, rope, q, cache, layer, wv.data != nullptr);
    }
    // matmul_rope_kv_store, then attention(cache, layer, q, out, n_heads, scale): one call, so that a
    // backend may fold the RoPE and the K/V store into its attention (and then need not write q).
    // Only when fuses_qkv().
    virtual void matmul_rope_attention(const TensorView& wqkv, const TensorView& wv, const TensorView& x,
                                       const TensorView& bias, const TensorView& qkv, int32_t n_heads,
                                       int32_t n_kv_heads, const RopeParams& rope, const TensorView& q,
                                       KvCache& cache, int32_t layer, const TensorView& out, float scale) {
        matmul_rope_kv_store(wqkv, wv, x, bias, qkv, n_heads, n_kv_heads, rope, q, cache, layer);
        attention(cache, layer, q, out, n_heads, scale);
    }

    // ---- Recorded steps. A forward pass may be recorded once and replayed (a CUDA graph):
    // `program` identifies the caller's op sequence and weights (never reused for another one).
    // Returns true when the backend replays a recorded pass: the caller then makes the same
    // alloc() calls but issues no ops before end_step(). The default records nothing.
    virtual bool begin_step(const Batch& batch, uint64_t program, KvCache& cache) {
        (void)program, (void)cache;
        begin(batch);
        return false;
    }
    // Ends the pass begun by begin_step (a recording backend runs it here).
    virtual void end_step() {}
    // True when the backend records steps (or tunes kernels) on first use, so that an engine's
    // first steps of each batch size cost more than later ones: the engine can warm it up at
    // start-up. While `on`, the backend may also time its kernel choices (slow, once per shape).
    virtual bool warms_up() const { return false; }
    // While `on`, a recording backend also records decode steps as if their longest context were
    // at least `context` tokens (0: their own), so that a warm-up of short throw-away requests can
    // record the steps of longer contexts too.
    virtual void set_warming_up(bool on, int32_t context = 0) { (void)on, (void)context; }
    // The `context` values a warm-up should visit for contexts up to max_context, longest first:
    // one per context bucket of the recorded steps; {0} when the recording does not depend on it.
    virtual std::vector<int32_t> warmup_contexts(int32_t max_context) const {
        (void)max_context;
        return {0};
    }

    // Greedy sampling: dst[r] = the first index of the maximum of row r of an F32 tensor and,
    // when logprob is not null, logprob[r] = that token's log-softmax, x[r][dst[r]] - log sum_i
    // exp x[r][i] (here in double, as the engine's sampler computes it for other requests).
    // picks (core/draw.h) first penalise listed logits (in x itself where a backend applies them
    // in place: x is scratch), then a row whose picks.draws[r].temperature > 0 is draw_row's token
    // instead (top_k, top_p, min_p, the race); such rows have no logprob. A row with a target
    // (picks.targets[r] >= 0) also gives target_logprob[r], that token's log-softmax (0 for the
    // other rows, when picks has targets). copied [picks.copies.size()][width] receives the rows
    // picks.copies names, penalised; scores [picks.scores.size()] the RowScore of each row
    // picks.scores names (core/draw.h), penalised, of its token or else of dst[row]. The default
    // copies x to the host and computes there (score_row).
    virtual void argmax_rows(const TensorView& x, int32_t* dst, float* logprob = nullptr,
                             const TokenPicks& picks = {}, float* target_logprob = nullptr, float* copied = nullptr,
                             RowScore* scores = nullptr) {
        std::vector<float> host(static_cast<size_t>(x.n_elements()));
        to_host(x, host.data());
        const int64_t width = x.ne[0];
        penalise_rows(host.data(), width, picks.penalties);
        for (size_t i = 0; copied && i < picks.copies.size(); ++i)
            std::copy_n(host.data() + picks.copies[i] * width, width, copied + static_cast<int64_t>(i) * width);
        for (int64_t r = 0; r < x.n_rows(); ++r) {
            const float* row = host.data() + r * width;
            if (!picks.draws.empty() && picks.draws[r].temperature > 0.0f) {
                MVLLM_CHECK(logprob == nullptr) << "a drawn token has no greedy logprob";
                dst[r] = draw_row(row, width, picks.draws[r]);
                continue;
            }
            dst[r] = static_cast<int32_t>(std::max_element(row, row + width) - row);
            if (logprob == nullptr) continue;
            const float max = row[dst[r]];
            double sum = 0;
            for (int64_t i = 0; i < width; ++i) sum += std::exp(double(row[i]) - max);
            const double log_z = max + std::log(sum);
            logprob[r] = static_cast<float>(max - log_z);
            if (target_logprob && !picks.targets.empty())
                target_logprob[r] = picks.targets[r] < 0 ? 0.0f : static_cast<float>(row[picks.targets[r]] - log_z);
        }
        for (size_t i = 0; scores && i < picks.scores.size(); ++i) {
            const ScoreAsk& a = picks.scores[i];
            scores[i] = score_row(host.data() + a.row * width, width, a.token >= 0 ? a.token : dst[a.row], a.n_top);
        }
    }

    // ---- Greedy decoding a step ahead: argmax_rows in two halves, so that a caller can queue the
    // next step before this one's tokens reach the host. argmax_enqueue starts the greedy tokens
    // (and, with `logprob`, their log-softmax) of x's rows and returns a ticket (1, 2, ...);
    // argmax_result waits for a ticket's results. The last two tickets stay readable: a caller
    // reads ticket t before it enqueues t + 2. The defaults compute at once on the host. picks:
    // as argmax_rows (the drawn rows' ids are fed tokens like the greedy ones).
    virtual uint64_t argmax_enqueue(const TensorView& x, bool logprob, const TokenPicks& picks = {}) {
        HostGreedy& r = host_greedy_[next_argmax_ticket() % 2];
        r.ticket = last_argmax_ticket();
        r.tokens.resize(static_cast<size_t>(x.ne[1]));
        r.logprobs.resize(logprob ? r.tokens.size() : 0);
        r.target_logprobs.assign(picks.targets.empty() ? 0 : r.tokens.size(), 0.0f);
        r.copied.resize(picks.copies.size() * static_cast<size_t>(x.ne[0]));
        r.scores.resize(picks.scores.size());
        if (!r.tokens.empty())
            argmax_rows(x, r.tokens.data(), logprob ? r.logprobs.data() : nullptr, picks,
                        r.target_logprobs.empty() ? nullptr : r.target_logprobs.data(), r.copied.data(),
                        r.scores.data());
        return r.ticket;
    }
    // target_logprob (or null): the rows' target logprobs, when the ticket's picks had targets.
    virtual void argmax_result(uint64_t ticket, int32_t* dst, float* logprob, float* target_logprob = nullptr) {
        const HostGreedy& r = host_greedy_[ticket % 2];
        MVLLM_CHECK(r.ticket == ticket) << "greedy result " << ticket << " is no longer kept";
        MVLLM_CHECK(!logprob || r.logprobs.size() == r.tokens.size()) << "greedy result " << ticket << " has no logprobs";
        MVLLM_CHECK(!target_logprob || r.target_logprobs.size() == r.tokens.size())
            << "greedy result " << ticket << " has no target logprobs";
        std::copy(r.tokens.begin(), r.tokens.end(), dst);
        if (logprob) std::copy(r.logprobs.begin(), r.logprobs.end(), logprob);
        if (target_logprob) std::copy(r.target_logprobs.begin(), r.target_logprobs.end(), target_logprob);
    }
    // The rows a ticket's picks.copies named, [copies][width] in host memory, read in place (a
    // vocabulary row is 0.6 MB); valid, as the ticket's results, until ticket + 2 is enqueued.
    virtual const float* copied_rows(uint64_t ticket) const {
        const HostGreedy& r = host_greedy_[ticket % 2];
        MVLLM_CHECK(r.ticket == ticket) << "greedy result " << ticket << " is no longer kept";
        return r.copied.data();
    }
    // The scores of the rows a ticket's picks.scores named, in that order, valid as copied_rows'.
    virtual const RowScore* row_scores(uint64_t ticket) const {
        const HostGreedy& r = host_greedy_[ticket % 2];
        MVLLM_CHECK(r.ticket == ticket) << "greedy result " << ticket << " is no longer kept";
        return r.scores.data();
    }
    // The ticket of the last argmax_enqueue on this backend (0: none yet).
    uint64_t last_argmax_ticket() const { return argmax_tickets_; }
    // True when argmax_rows applies penalties where the logits are, so that an engine should pass
    // them rather than copy the logits to its own sampler (the default's host copy is that copy).
    virtual bool applies_penalties() const { return true; }
    // True when an engine should score prompt positions (SamplingParams::prompt_logprobs up to 1)
    // through argmax_rows' targets rather than copy their logits to its own threads: where the
    // logits stay on a device. The default (a host copy, one thread) says no.
    virtual bool scores_targets() const { return false; }
    // True when an engine should have rows it scores on the host (top logprobs, a drawn token's
    // logprob) scored by argmax_rows instead (TokenPicks::scores: ~20 values a row come back, not
    // the row): where the logits stay on a device. The default (a host copy, one thread) says no.
    virtual bool scores_rows() const { return false; }
    // True when the embedding reads a batch's fed_token(r) ids (kv/batch.h) on the device, from
    // the last enqueued argmax, so the host need not wait for it; otherwise the decoder waits and
    // substitutes them before the pass.
    virtual bool embeds_fed_tokens() const { return false; }

protected:
    uint64_t next_argmax_ticket() { return ++argmax_tickets_; }

private:
    struct HostGreedy {
        uint64_t ticket = 0;
        std::vector<int32_t> tokens;
        std::vector<float> logprobs;
        std::vector<float> target_logprobs;
        std::vector<float> copied;
        std::vector<RowScore> scores;
    };
    HostGreedy host_greedy_[2];
    uint64_t argmax_tickets_ = 0;
};

}  // namespace mvllm
