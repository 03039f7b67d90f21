// The CPU backend: weights used in place from host memory (mapped files), a persistent thread
// pool, SIMD kernels chosen at run time, and one of three attention variants.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "core/thread_pool.h"

namespace mvllm {

struct CpuBackendOptions {
    int n_threads = 0;  // 0: all hardware threads
    AttentionVariant attention = AttentionVariant::Fused;
    // Every row's result independent of the rest of the batch (--batch-invariant): fixed-order
    // matmul kernels for every batch size, fixed attention split points.
    bool batch_invariant = false;
    // An engine scores prompt positions through argmax_rows' targets here (the way a GPU backend
    // does) instead of on its own threads: one thread, a double log-sum-exp per row, so only for
    // tests of that path and comparisons.
    bool scores_targets = false;
    // The same for the rows an engine scores on the host (TokenPicks::scores, the GPU backend's way
    // of giving top logprobs): for tests of that path.
    bool scores_rows = false;
};

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(const CpuBackendOptions& options);
    std::string name() const override;
    bool scores_targets() const override { return options_.scores_targets; }
    bool scores_rows() const override { return options_.scores_rows; }

    Result<TensorView> upload_weight(const TensorView& host) override { return host; }
    Result<DeviceMemory> memory_info() const override;
    Result<std::unique_ptr<KvCache>> create_kv_cache(const KvCacheConfig& config) override {
        return KvCache::create(config);
    }

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

    ThreadPool& pool() { return pool_; }

private:
    CpuBackendOptions options_;
    ThreadPool pool_;
    const Batch* batch_ = nullptr;
    MatmulScratch matmul_scratch_;
    AttentionScratch attention_scratch_;
    // The activation arena: slot i is reused by the i-th alloc() of every forward.
    std::vector<std::vector<uint8_t>> arena_;
    size_t arena_next_ = 0;
};

}  // namespace mvllm
