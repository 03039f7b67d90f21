// The CUDA backend: weights uploaded once to the GPU in their stored types, a paged KV cache in
// device memory (F32, F16 or BF16), an activation arena, the batch metadata uploaded once per
// forward, and the kernels of backend/cuda/*.cuh on one stream. Include-safe without CUDA
// headers (the CUDA handles are opaque here).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace mvllm {

enum class CudaAttentionVariant { Naive, Grouped, Fused };

struct CudaBackendOptions {
    int device = 0;
    CudaAttentionVariant attention = CudaAttentionVariant::Fused;
    // --batch-invariant: the GEMV for every batch size instead of cuBLAS beyond 8 rows, and the
    // fused attention split at fixed positions (cuda/matmul.cuh, cuda/attention.cuh).
    bool batch_invariant = false;
    // Record decode steps as CUDA graphs (begin_step). The environment variable
    // MVLLM_CUDA_GRAPHS=0 turns them off too (for A/B timings).
    bool graphs = true;
    // Keep an F16 copy of each quantised matrix for the cuBLAS path (prefill, batches beyond
    // kGemvMaxTokens rows) instead of dequantising it into scratch on every such matmul, while
    // the copies take at most a quarter of the device's memory (later matrices fall back).
    // MVLLM_CUDA_F16_WEIGHTS=0 turns it off too (for A/B timings); never in batch-invariant mode.
    bool f16_weight_copies = true;
    // RoPE, the QKV bias and the K/V write in the fused QKV GEMV's epilogue (1-4 rows, quantised
    // weights) instead of a rope_kv_store kernel after it. Auto: where that GEMV launches at least
    // one CTA per SM. On the H200 it made the 7B decode step (576 CTAs) 1-2.4 % faster and the
    // 0.5B step (72 CTAs) 0-3 % slower: in a launch shorter than one wave, the epilogue's latency
    // is the kernel's critical path (bench/NOTES.md, fourteenth and fifteenth sessions).
    // MVLLM_QKV_ROPE=1 forces it on, =0 off.
    enum class QkvRopeEpilogue { Auto, On, Off };
    QkvRopeEpilogue qkv_rope_epilogue = QkvRopeEpilogue::Auto;
    // The embedding reads a batch's fed tokens (kv/batch.h) on the device from the last argmax,
    // so that SequenceRunner::greedy queues each decode step before the previous one's token has
    // reached the host (embeds_fed_tokens): on the H200 the device's gap between two steps went
    // from 20-22 to 9 us, 0.5B decode +2.5 %, 7B +0.5 % (bench/NOTES.md, twenty-sixth session).
    // MVLLM_CUDA_FED_TOKENS=0 turns it off, =1 on.
    bool fed_tokens_on_device = true;
    // The engine passes penalised rows to argmax_rows, which applies their penalties on the
    // device (cuda::launch_penalties), instead of copying their logits to its sampler: 0.5B batch-1
    // T 1 with repetition and frequency penalties 585 -> 1,601 tok/s on the H100 (bench/NOTES.md,
    // twenty-ninth session). MVLLM_CUDA_PENALTIES=0 turns it off. argmax_rows applies penalties it
    // is given either way.
    bool penalties_on_device = true;
    // top_k / top_p cuts start with a histogram of each row's distances below its max over many
    // CTAs per row, so that the exact one-CTA selection reads one bin's values instead of the whole
    // row (draw_cut.cu; the same cuts): 0.5B batch-1 top_p 0.95 829 -> 1,548 tok/s, B4(b) top_p
    // +13 %, top_k unchanged (H100, twenty-ninth session). MVLLM_CUDA_BINNED_CUT=0 turns it off.
    bool binned_cut = true;
    // The draw kernel's race score in one out-of-line function (its inlined double logarithms made
    // the warps wait on instruction fetch 60 % of the time, ncu, twenty-seventh session). Measured
    // no faster (H100, twenty-ninth session: batch 1 and B4(b) within 1 %), so off;
    // MVLLM_CUDA_DRAW_OUTLINED=1 turns it on.
    bool draw_score_outlined = false;
    // The engine scores prompt positions (prompt_logprobs up to 1) through argmax_rows' targets on
    // the device (cuda::launch_target_logprob) instead of copying their logits to the host:
    // `perplexity` on the 0.5B 4,790 -> 56,056 tok/s (H100, twenty-ninth session).
    // MVLLM_CUDA_ROW_SCORES=0 turns it off. argmax_rows scores targets it is given either way.
    bool scores_targets = true;
    // The engine has the rows it would score on the host (top logprobs, a drawn token's logprob)
    // scored on the device (cuda::launch_row_scores: log-sum-exp, the token's logit and the top
    // alternatives, ~170 bytes a row) instead of copying each 0.6 MB row back.
    // MVLLM_CUDA_TOP_SCORES=0 turns it off. argmax_rows scores rows it is asked to either way.
    bool scores_rows = true;
};

// True when a CUDA device can be used (driver present, at least one device).
bool cuda_device_available();

class CudaBackend final : public Backend {
public:
    // Errors when no CUDA device can be used.
    static Result<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& options);
    ~CudaBackend() override;
    std::string name() const override;

    // Copies a weight to device memory (once). Refuses types without CUDA kernels (Q5_K) and
    // reports what did not fit when device memory runs out.
    Result<TensorView> upload_weight(const TensorView& host) override;
    Result<DeviceMemory> memory_info() const override;
    // Device-resident paged KV cache (F32, F16 or BF16); head_dim 16, 32, 64 or 128.
    Result<std::unique_ptr<KvCache>> create_kv_cache(const KvCacheConfig& config) override;

    void begin(const Batch& batch) override;
    TensorView alloc(DType type, int64_t width, int64_t n_rows) override;

    void embed(const TensorView& table, const TensorView& out) override;
    void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) override;
    void matmul(const TensorView& w, const TensorView& x, const TensorView& bias, const TensorView& out) override;
    void rope(const TensorView& x, int32_t n_heads, const RopeParams& rope) override;
    void kv_store(KvCache& cache, int32_t layer, const TensorView& k, const TensorView& v) override;
    void attention(KvCache& cache, int32_t layer, const TensorView& q, const TensorView& out,
                   int32_t n_heads, float scale) override;
    void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) override;
    void add(const TensorView& acc, const TensorView& x) override;
    void gather_logit_rows(const TensorView& x, const TensorView& out) override;
    void to_host(const TensorView& x, float* dst) override;

    // Fused forms (backend.h): the residual add in the GEMV epilogue, gate/up + SwiGLU in one
    // GEMV (or one GEMM of the stacked F16 copies + one SwiGLU kernel), QKV as one matrix + one
    // bias / RoPE / KV-write kernel.
    void matmul_add(const TensorView& w, const TensorView& x, const TensorView& acc, const TensorView& scratch) override;
    void matmul_swiglu(const TensorView& w_gate, const TensorView& w_up, const TensorView& x, const TensorView& out,
                       const TensorView& scratch) override;
    // The unfused projections' RoPE and K/V store in one kernel (rope_kv_store's, reading q, k, v).
    void rope_qk_kv_store(const TensorView& q, const TensorView& k, const TensorView& v, int32_t n_heads,
                          int32_t n_kv_heads, const RopeParams& rope, KvCache& cache, int32_t layer) override;
    bool fuses_qkv() const override { return true; }
    // MVLLM_QKV_V_APART=0: files whose V has another type keep the unfused projections (A/B).
    bool fuses_qkv_v_apart() const override;
    // With V apart on 1..8 rows of Q4_K q | k and Q6_K v: both matrices in one GEMV launch.
    void matmul_qkv(const TensorView& wqkv, const TensorView& wv, const TensorView& x, const TensorView& qkv) override;
    void rope_kv_store(const TensorView& qkv, const TensorView& bias, int32_t n_heads, int32_t n_kv_heads,
                       const RopeParams& rope, const TensorView& q, KvCache& cache, int32_t layer,
                       bool v_apart) override;
    // With options.qkv_rope_epilogue, up to 4 rows on quantised weights: one GEMV whose epilogue
    // applies RoPE and stores q and the K/V (over both matrices with V apart); otherwise matmul_qkv
    // and the rope_kv_store kernel.
    void matmul_rope_kv_store(const TensorView& wqkv, const TensorView& wv, const TensorView& x, const TensorView& bias,
                              const TensorView& qkv, int32_t n_heads, int32_t n_kv_heads, const RopeParams& rope,
                              const TensorView& q, KvCache& cache, int32_t layer) override;
    // Where the GEMV does not take RoPE, a batch of one new token per sequence: matmul_qkv, then
    // the decode attention kernel applying RoPE and storing the new K/V itself (q is not written).
    void matmul_rope_attention(const TensorView& wqkv, const TensorView& wv, const TensorView& x,
                               const TensorView& bias, const TensorView& qkv, int32_t n_heads, int32_t n_kv_heads,
                               const RopeParams& rope, const TensorView& q, KvCache& cache, int32_t layer,
                               const TensorView& out, float scale) override;

    // Decode steps (every sequence one token, up to 512 sequences, fused attention)
    // are recorded as one CUDA graph per (program, cache, batch size, context bucket) on their
    // second occurrence and replayed after: the step's inputs go to fixed device buffers by one
    // copy, then one graph launch (graph_step.cpp).
    bool begin_step(const Batch& batch, uint64_t program, KvCache& cache) override;
    void end_step() override;
    // Graphs are recorded and cuBLASLt algorithms chosen on first use: an engine warms them up.
    bool warms_up() const override;
    // While on, the first eager call of a GEMM shape times cuBLASLt's candidates (gemm_tuned.cuh),
    // and decode steps are keyed, planned and recorded for the bucket of at least `context`.
    void set_warming_up(bool on, int32_t context = 0) override;
    // The context buckets (256, 512, ... up to the one holding max_context), longest first.
    std::vector<int32_t> warmup_contexts(int32_t max_context) const override;
    // Recorded graphs so far (tests, benchmarks).
    int32_t n_graphs() const;
    // Truncating rows whose cut the binned first step narrowed, and those read whole, since the
    // last call (CudaBackendOptions::binned_cut; tests). Synchronous.
    std::pair<uint64_t, uint64_t> binned_cut_rows();

    // Greedy sampling on the device: the argmax of each row of an F32 device tensor
    // (e.g. the logits), copied to dst[x.ne[1]] (argmax_enqueue, then argmax_result); the picks'
    // penalties change x in place first (cuda::launch_penalties), and rows with a TokenDraw of
    // temperature > 0 are drawn on the device (cuda::launch_draw).
    void argmax_rows(const TensorView& x, int32_t* dst, float* logprob = nullptr, const TokenPicks& picks = {},
                     float* target_logprob = nullptr, float* copied = nullptr, RowScore* scores = nullptr) override;
    // The argmax (or draw) kernels queued on the stream; their results land in one of two mapped
    // host slots (ticket % 2) and, for fed tokens, in a device buffer the embedding reads.
    uint64_t argmax_enqueue(const TensorView& x, bool logprob, const TokenPicks& picks = {}) override;
    void argmax_result(uint64_t ticket, int32_t* dst, float* logprob, float* target_logprob = nullptr) override;
    // In the slot's pinned staging, written by copies queued before the argmax kernels.
    const float* copied_rows(uint64_t ticket) const override;
    // Unpacked from the slot's mapped results by argmax_result.
    const RowScore* row_scores(uint64_t ticket) const override;
    bool applies_penalties() const override;
    bool scores_targets() const override;
    bool scores_rows() const override;
    bool embeds_fed_tokens() const override;
    // Raw byte copies between a device tensor and host memory (tests, tools). Synchronous.
    void download(const TensorView& x, void* dst);
    void upload(const void* src, const TensorView& x);
    // Copies one layer's K and V blocks of a device cache to host (n_blocks * block bytes each).
    void download_kv_layer(KvCache& cache, int32_t layer, void* k_dst, void* v_dst);
    void synchronize();
    int32_t sm_count() const;

private:
    struct Impl;
    explicit CudaBackend(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace mvllm
