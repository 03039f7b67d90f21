#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/device_batch.h"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/ops.cuh"

namespace mvllm {
namespace {

#define MVLLM_CUDA_OK(expr)                                                                  \
    do {                                                                                     \
        const cudaError_t mvllm_err_ = (expr);                                               \
        MVLLM_CHECK(mvllm_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(mvllm_err_); \
    } while (0)

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string memory_report() {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%.1f MiB free of %.1f MiB", mib(free_b), mib(total_b));
    return buf;
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

bool cuda_device_available() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return false;
    }
    return n > 0;
}

struct CudaBackend::Impl {
    CudaBackendOptions options;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    int32_t n_sms = 0;
    std::string device_name;
    std::vector<void*> weights;  // device allocations of upload_weight

    // The activation arena: slot i is reused by the i-th alloc() of every forward.
    struct Slot {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    std::vector<Slot> arena;
    size_t arena_next = 0;

    // Batch metadata: packed on the host (pinned), one copy to the device per begin().
    uint8_t* meta_host = nullptr;
    void* meta_device = nullptr;
    size_t meta_capacity = 0;
    cudaEvent_t meta_copied = nullptr;
    cuda::DeviceBatch batch;
    const int64_t* seq_ctx_offset = nullptr;  // [n_seqs] device
    int64_t total_context = 0;

    float* inv_freq = nullptr;  // [head_dim / 2] device copy of RopeParams::inv_freq
    std::vector<float> inv_freq_host;
    int32_t* argmax_out = nullptr;
    size_t argmax_capacity = 0;

    cuda::MatmulScratch matmul_scratch;
    cuda::AttentionScratch attention_scratch;

    ~Impl() {
        if (stream) cudaStreamSynchronize(stream);
        for (void* p : weights) cudaFree(p);
        for (Slot& s : arena) cudaFree(s.ptr);
        if (meta_host) cudaFreeHost(meta_host);
        if (meta_device) cudaFree(meta_device);
        if (meta_copied) cudaEventDestroy(meta_copied);
        if (inv_freq) cudaFree(inv_freq);
        if (argmax_out) cudaFree(argmax_out);
        if (cublas) cublasDestroy(cublas);
        if (stream) cudaStreamDestroy(stream);
    }

    void ensure_meta(size_t bytes) {
        if (bytes <= meta_capacity) return;
        MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
        if (meta_host) cudaFreeHost(meta_host);
        if (meta_device) cudaFree(meta_device);
        meta_host = nullptr;
        meta_device = nullptr;
        meta_capacity = 0;
        const size_t cap = align_up(bytes * 2, 4096);
        MVLLM_CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&meta_host), cap));
        if (cudaMalloc(&meta_device, cap) != cudaSuccess) {
            cudaGetLastError();
            meta_device = nullptr;
            throw DeviceOutOfMemory(
                make_error("out of GPU memory: batch metadata of ", mib(cap), " MiB did not fit (", memory_report(), ")")
                    .message());
        }
        meta_capacity = cap;
    }
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& options) {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        cudaGetLastError();
        return make_error("no CUDA device is available (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices",
                          ")");
    }
    if (options.device < 0 || options.device >= n)
        return make_error("CUDA device ", options.device, " does not exist (", n, " devices)");
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    MVLLM_CUDA_OK(cudaSetDevice(options.device));
    cudaDeviceProp prop{};
    MVLLM_CUDA_OK(cudaGetDeviceProperties(&prop, options.device));
    impl->n_sms = prop.multiProcessorCount;
    impl->device_name = prop.name;
    MVLLM_CUDA_OK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
    MVLLM_CUDA_OK(cudaEventCreateWithFlags(&impl->meta_copied, cudaEventDisableTiming));
    if (cublasCreate(&impl->cublas) != CUBLAS_STATUS_SUCCESS) return make_error("cuBLAS could not be initialised");
    cublasSetStream(impl->cublas, impl->stream);
    return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

std::string CudaBackend::name() const {
    const char* variant = impl_->options.attention == CudaAttentionVariant::Naive     ? "naive"
                          : impl_->options.attention == CudaAttentionVariant::Grouped ? "grouped"
                                                                                      : "fused";
    return "cuda (" + impl_->device_name + ", " + std::to_string(impl_->n_sms) + " SMs, attention " + variant +
           (impl_->options.batch_invariant ? ", batch-invariant" : "") + ")";
}

int32_t CudaBackend::sm_count() const { return impl_->n_sms; }

Result<TensorView> CudaBackend::upload_weight(const TensorView& host) {
    if (!cuda::cuda_weight_type_supported(host.type))
        return make_error("weight type ", type_name(host.type), " (tensor ", shape_string(host.ne),
                          ") is not supported by the CUDA backend (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)");
    if (host.type != DType::F32 && host.type != DType::F16 && host.type != DType::BF16 && host.ne[0] % 32 != 0)
        return make_error("quantised weight rows of ", host.ne[0], " values are not supported by the CUDA backend");
    const size_t bytes = host.n_bytes();
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess) {
        cudaGetLastError();
        return make_error("out of GPU memory: weight ", shape_string(host.ne), " ", type_name(host.type), " (",
                          mib(bytes), " MiB) did not fit; ", memory_report());
    }
    impl_->weights.push_back(ptr);
    MVLLM_CUDA_OK(cudaMemcpy(ptr, host.data, bytes, cudaMemcpyHostToDevice));
    TensorView dev = host;
    dev.data = ptr;
    return dev;
}

Result<DeviceMemory> CudaBackend::memory_info() const {
    DeviceMemory m;
    const cudaError_t err = cudaMemGetInfo(&m.free, &m.total);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return make_error("cudaMemGetInfo failed: ", cudaGetErrorString(err));
    }
    return m;
}

Result<std::unique_ptr<KvCache>> CudaBackend::create_kv_cache(const KvCacheConfig& config) {
    if (!cuda::cuda_attention_supported(config.head_dim, config.dtype) && config.head_dim > 0)
        if (config.dtype == DType::F32 || config.dtype == DType::F16 || config.dtype == DType::BF16)
            return make_error("head_dim ", config.head_dim, " is not supported by the CUDA attention kernels (16, 32, 64, 128)");
    MVLLM_ASSIGN_OR_RETURN(const size_t bytes, KvCache::storage_bytes(config, {DType::F32, DType::F16, DType::BF16}));
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return make_error("out of GPU memory: KV cache of ", config.n_blocks, " blocks (", mib(bytes),
                          " MiB) did not fit; ", memory_report());
    }
    MVLLM_CUDA_OK(cudaMemset(ptr, 0, bytes));
    return KvCache::wrap(config, ptr, [](void* p) { cudaFree(p); }, /*on_device=*/true);
}

void CudaBackend::begin(const Batch& b) {
    Impl& im = *impl_;
    MVLLM_CUDA_OK(cudaEventSynchronize(im.meta_copied));  // the pinned buffer is free again
    const size_t n = b.token_ids.size(), n_seqs = b.seqs.size(), n_bt = b.block_tables.size(),
                 n_logits = b.logit_rows.size();
    // Packed layout: int64 arrays first (8-byte aligned), then int32 arrays.
    const size_t bytes = (n + n_seqs) * 8 + (3 * n + n_bt + 4 * n_seqs + n_logits) * 4 + 64;
    im.ensure_meta(bytes);
    uint8_t* h = im.meta_host;
    auto* d = static_cast<uint8_t*>(im.meta_device);
    size_t off = 0;
    auto put = [&](const void* src, size_t count, size_t elem) -> const void* {
        std::memcpy(h + off, src, count * elem);
        const void* dev = d + off;
        off += align_up(count * elem, 8);
        return dev;
    };
    std::vector<int32_t> row_seq(n), sb(n_seqs), st(n_seqs), sn(n_seqs), sc(n_seqs);
    std::vector<int64_t> ctx_off(n_seqs);
    int32_t max_ctx = 0, max_tokens = 0;
    int64_t total = 0;
    for (size_t s = 0; s < n_seqs; ++s) {
        const BatchSequence& q = b.seqs[s];
        for (int32_t i = 0; i < q.n_tokens; ++i) row_seq[q.token_begin + i] = static_cast<int32_t>(s);
        sb[s] = q.block_table_begin;
        st[s] = q.token_begin;
        sn[s] = q.n_tokens;
        sc[s] = q.context_len;
        ctx_off[s] = total;
        total += q.context_len;
        max_ctx = std::max(max_ctx, q.context_len);
        max_tokens = std::max(max_tokens, q.n_tokens);
    }
    cuda::DeviceBatch& db = im.batch;
    db.n_tokens = static_cast<int32_t>(n);
    db.n_seqs = static_cast<int32_t>(n_seqs);
    db.n_logit_rows = static_cast<int32_t>(n_logits);
    db.block_size = b.block_size;
    db.max_context = max_ctx;
    db.max_seq_tokens = max_tokens;
    db.slot_mapping = static_cast<const int64_t*>(put(b.slot_mapping.data(), n, 8));
    im.seq_ctx_offset = static_cast<const int64_t*>(put(ctx_off.data(), n_seqs, 8));
    db.token_ids = static_cast<const int32_t*>(put(b.token_ids.data(), n, 4));
    db.positions = static_cast<const int32_t*>(put(b.positions.data(), n, 4));
    db.row_seq = static_cast<const int32_t*>(put(row_seq.data(), n, 4));
    db.block_tables = static_cast<const int32_t*>(put(b.block_tables.data(), n_bt, 4));
    db.seq_block_begin = static_cast<const int32_t*>(put(sb.data(), n_seqs, 4));
    db.seq_token_begin = static_cast<const int32_t*>(put(st.data(), n_seqs, 4));
    db.seq_n_tokens = static_cast<const int32_t*>(put(sn.data(), n_seqs, 4));
    db.seq_context_len = static_cast<const int32_t*>(put(sc.data(), n_seqs, 4));
    db.logit_rows = static_cast<const int32_t*>(put(b.logit_rows.data(), n_logits, 4));
    MVLLM_CHECK(off <= im.meta_capacity) << "batch metadata packing";
    im.total_context = total;
    MVLLM_CUDA_OK(cudaMemcpyAsync(im.meta_device, im.meta_host, off, cudaMemcpyHostToDevice, im.stream));
    MVLLM_CUDA_OK(cudaEventRecord(im.meta_copied, im.stream));
    im.arena_next = 0;
}

TensorView CudaBackend::alloc(DType type, int64_t width, int64_t n_rows) {
    Impl& im = *impl_;
    TensorView t;
    t.type = type;
    t.ne = {width, n_rows, 1, 1};
    if (im.arena_next == im.arena.size()) im.arena.emplace_back();
    Impl::Slot& slot = im.arena[im.arena_next++];
    const size_t need = align_up(std::max<size_t>(t.n_bytes(), 1), 256);
    if (slot.bytes < need) {
        MVLLM_CUDA_OK(cudaStreamSynchronize(im.stream));  // kernels may still use the old slot
        if (slot.ptr) MVLLM_CUDA_OK(cudaFree(slot.ptr));
        slot.ptr = nullptr;
        slot.bytes = 0;
        if (cudaMalloc(&slot.ptr, need) != cudaSuccess) {
            cudaGetLastError();  // clear the sticky-free allocation error
            slot.ptr = nullptr;
            throw DeviceOutOfMemory(make_error("out of GPU memory: activation ", shape_string(t.ne), " ",
                                               type_name(type), " (", mib(need), " MiB) did not fit; ",
                                               memory_report())
                                        .message());
        }
        slot.bytes = need;
    }
    t.data = slot.ptr;
    return t;
}

void CudaBackend::embed(const TensorView& table, const TensorView& out) {
    cuda::launch_embed(table, impl_->batch.token_ids, out, impl_->stream);
}

void CudaBackend::rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) {
    cuda::launch_rms_norm(x, weight, eps, out, impl_->stream);
}

void CudaBackend::matmul(const TensorView& w, const TensorView& x, const TensorView& bias, const TensorView& out) {
    cuda::launch_matmul(w, x, bias, out, impl_->matmul_scratch, impl_->cublas, impl_->stream,
                        impl_->options.batch_invariant);
}

void CudaBackend::rope(const TensorView& x, int32_t n_heads, const RopeParams& rope) {
    Impl& im = *impl_;
    const size_t half = static_cast<size_t>(rope.head_dim / 2);
    if (im.inv_freq_host.size() != half ||
        std::memcmp(im.inv_freq_host.data(), rope.inv_freq, half * sizeof(float)) != 0) {
        MVLLM_CUDA_OK(cudaStreamSynchronize(im.stream));
        if (im.inv_freq) cudaFree(im.inv_freq);
        MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&im.inv_freq), half * sizeof(float)));
        MVLLM_CUDA_OK(cudaMemcpy(im.inv_freq, rope.inv_freq, half * sizeof(float), cudaMemcpyHostToDevice));
        im.inv_freq_host.assign(rope.inv_freq, rope.inv_freq + half);
    }
    cuda::launch_rope(x, n_heads, rope.head_dim, im.batch.positions, im.inv_freq, im.stream);
}

namespace {
cuda::DeviceKvLayer device_layer(KvCache& cache, int32_t layer) {
    MVLLM_CHECK(cache.on_device()) << "the CUDA backend needs a KV cache from its own create_kv_cache()";
    const KvLayerView v = cache.layer(layer);
    cuda::DeviceKvLayer d;
    d.k = v.k;
    d.v = v.v;
    d.dtype = static_cast<uint32_t>(v.dtype);
    d.n_kv_heads = v.n_kv_heads;
    d.head_dim = v.head_dim;
    d.block_size = v.block_size;
    return d;
}
}  // namespace

void CudaBackend::kv_store(KvCache& cache, int32_t layer, const TensorView& k, const TensorView& v) {
    cuda::launch_kv_store(impl_->batch, device_layer(cache, layer), k, v, impl_->stream);
}

void CudaBackend::attention(KvCache& cache, int32_t layer, const TensorView& q, const TensorView& out,
                            int32_t n_heads, float scale) {
    Impl& im = *impl_;
    const cuda::CudaAttention variant = im.options.attention == CudaAttentionVariant::Naive ? cuda::CudaAttention::Naive
                                        : im.options.attention == CudaAttentionVariant::Grouped
                                            ? cuda::CudaAttention::Grouped
                                            : cuda::CudaAttention::Fused;
    cuda::launch_attention(variant, im.batch, im.seq_ctx_offset, im.total_context, device_layer(cache, layer), q, out,
                           n_heads, scale, im.attention_scratch, im.n_sms, im.stream, im.options.batch_invariant);
}

void CudaBackend::silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) {
    cuda::launch_silu_mul(gate, up, out, impl_->stream);
}

void CudaBackend::add(const TensorView& acc, const TensorView& x) { cuda::launch_add(acc, x, impl_->stream); }

void CudaBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
    cuda::launch_gather_rows(x, impl_->batch.logit_rows, out, impl_->stream);
}

void CudaBackend::to_host(const TensorView& x, float* dst) {
    MVLLM_CHECK(x.type == DType::F32) << "to_host of " << type_name(x.type);
    download(x, dst);
}

void CudaBackend::download(const TensorView& x, void* dst) {
    MVLLM_CUDA_OK(cudaMemcpyAsync(dst, x.data, x.n_bytes(), cudaMemcpyDeviceToHost, impl_->stream));
    MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream));
}

void CudaBackend::upload(const void* src, const TensorView& x) {
    MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream));
    MVLLM_CUDA_OK(cudaMemcpy(x.data, src, x.n_bytes(), cudaMemcpyHostToDevice));
}

void CudaBackend::download_kv_layer(KvCache& cache, int32_t layer, void* k_dst, void* v_dst) {
    const KvLayerView v = cache.layer(layer);
    const size_t half = v.offset(cache.config().n_blocks, 0, 0);
    MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream));
    MVLLM_CUDA_OK(cudaMemcpy(k_dst, v.k, half, cudaMemcpyDeviceToHost));
    MVLLM_CUDA_OK(cudaMemcpy(v_dst, v.v, half, cudaMemcpyDeviceToHost));
}

void CudaBackend::argmax_rows(const TensorView& x, int32_t* dst) {
    Impl& im = *impl_;
    const size_t rows = static_cast<size_t>(x.ne[1]);
    if (rows == 0) return;
    if (im.argmax_capacity < rows) {
        MVLLM_CUDA_OK(cudaStreamSynchronize(im.stream));
        if (im.argmax_out) cudaFree(im.argmax_out);
        MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&im.argmax_out), rows * sizeof(int32_t)));
        im.argmax_capacity = rows;
    }
    cuda::launch_argmax(x, im.argmax_out, im.stream);
    MVLLM_CUDA_OK(cudaMemcpyAsync(dst, im.argmax_out, rows * sizeof(int32_t), cudaMemcpyDeviceToHost, im.stream));
    MVLLM_CUDA_OK(cudaStreamSynchronize(im.stream));
}

void CudaBackend::synchronize() { MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream)); }

}  // namespace mvllm
