// The operations the one decoder needs, implemented once per backend (CPU now, CUDA later).
// Tensors are views into memory the backend owns: weights uploaded once, activations allocated
// from a per-forward arena. The decoder calls these in order; a backend may run them eagerly
// (CPU) or record them (a CUDA graph).
//
// Activation tensors have ne = {width, n_rows}: one row per query token of the flat batch.
#pragma once

#include <array>
#include <memory>
#include <stdexcept>
#include <string>

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
};

}  // namespace mvllm
