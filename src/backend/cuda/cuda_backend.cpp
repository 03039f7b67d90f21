#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/env.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/weight_layout.h"

namespace mvllm {
namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

std::string cuda_memory_report() {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%.1f MiB free of %.1f MiB", mib(free_b), mib(total_b));
    return buf;
}

bool cuda_device_available() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return false;
    }
    return n > 0;
}

CudaBackend::Impl::~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    if (copy_stream) cudaStreamSynchronize(copy_stream);
    if (graph_timing.enabled) {
        collect_graph_time();
        const GraphTiming& t = graph_timing;
        std::fprintf(stderr,
                     "cuda: %lld graph launches, %.1f us of device time each (start to end of the graph), %.1f us "
                     "from one graph's end to the next one's start (%lld pairs); host: %.1f us from a graph launch "
                     "to its argmax on the host (%lld), %.1f us from there to the next launch (%lld)\n",
                     static_cast<long long>(t.n), t.n ? 1e3 * t.total_ms / t.n : 0.0,
                     t.n_gap ? 1e3 * t.gap_ms / t.n_gap : 0.0, static_cast<long long>(t.n_gap),
                     t.n_launch_to_result ? 1e6 * t.launch_to_result_s / t.n_launch_to_result : 0.0,
                     static_cast<long long>(t.n_launch_to_result),
                     t.n_between ? 1e6 * t.host_between_s / t.n_between : 0.0, static_cast<long long>(t.n_between));
        for (int k = 0; k < 2; ++k) {
            cudaEventDestroy(graph_timing.start[k]);
            cudaEventDestroy(graph_timing.stop[k]);
        }
    }
    for (auto& [key, g] : graphs) {
        if (g.exec) cudaGraphExecDestroy(g.exec);
        if (g.graph) cudaGraphDestroy(g.graph);
        if (g.meta_device) cudaFree(g.meta_device);
    }
    for (void* p : weights) cudaFree(p);
    for (Slot& s : arena) cudaFree(s.ptr);
    if (meta_host) cudaFreeHost(meta_host);
    if (meta_device) cudaFree(meta_device);
    if (meta_copied) cudaEventDestroy(meta_copied);
    if (inv_freq) cudaFree(inv_freq);
    if (argmax_out) cudaFreeHost(argmax_out);
    if (argmax_keys) cudaFree(argmax_keys);
    if (argmax_logprob) cudaFreeHost(argmax_logprob);
    if (argmax_fed) cudaFree(argmax_fed);
    if (draws_host) cudaFreeHost(draws_host);
    if (draws_dev) cudaFree(draws_dev);
    if (penalties_host) cudaFreeHost(penalties_host);
    if (penalties_dev) cudaFree(penalties_dev);
    if (copies_host) cudaFreeHost(copies_host);
    if (score_parts) cudaFree(score_parts);
    if (draw_cuts) cudaFree(draw_cuts);
    if (draw_binned) cudaFree(draw_binned);
    if (draw_score) cudaFree(draw_score);
    if (draw_index) cudaFree(draw_index);
    for (ArgmaxSlot& slot : argmax_slots)
        if (slot.done) cudaEventDestroy(slot.done);
    for (cudaEvent_t e : staged)
        if (e) cudaEventDestroy(e);
    if (copy_stream) cudaStreamDestroy(copy_stream);
    if (cublas) cublasDestroy(cublas);
    if (cublas_workspace) cudaFree(cublas_workspace);
    if (stream) cudaStreamDestroy(stream);
}

void CudaBackend::Impl::ensure_meta(size_t bytes) {
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
        throw DeviceOutOfMemory(make_error("out of GPU memory: batch metadata of ", mib(cap), " MiB did not fit (",
                                           cuda_memory_report(), ")")
                                    .message());
    }
    meta_capacity = cap;
}

void CudaBackend::Impl::set_inv_freq(const RopeParams& rope) {
    const size_t half = static_cast<size_t>(rope.head_dim / 2);
    if (inv_freq_host.size() == half && std::memcmp(inv_freq_host.data(), rope.inv_freq, half * sizeof(float)) == 0)
        return;
    MVLLM_CHECK(mode != StepMode::Capture) << "RoPE frequencies changed inside a recorded step";
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
    if (inv_freq) cudaFree(inv_freq);
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&inv_freq), half * sizeof(float)));
    copy_to_device(inv_freq, rope.inv_freq, half * sizeof(float));
    inv_freq_host.assign(rope.inv_freq, rope.inv_freq + half);
}

// On the backend's stream, then waits: a plain cudaMemcpy runs on the legacy stream, which a
// non-blocking stream does not wait for, and may return before a pageable source has landed.
void CudaBackend::Impl::copy_to_device(void* dst, const void* src, size_t bytes) {
    MVLLM_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
}

const cuda::QxView* CudaBackend::Impl::qx_for(const TensorView& w, const TensorView& x, cuda::QxView* storage) {
    const int64_t n_in = x.ne[0], n_rows = x.ne[1];
    if (!cuda::gemv_uses_qx(w.type) ||
        cuda::choose_matmul_path(w.type, n_rows, options.batch_invariant) != cuda::MatmulPath::Gemv || n_rows == 0)
        return nullptr;
    if (qx_source == x.data && qx_n_in == n_in && qx_rows == n_rows) {
        *storage = cuda::qx_view(matmul_scratch.qx, n_in, n_rows);
        return storage;
    }
    *storage = cuda::ensure_qx(matmul_scratch, n_in, n_rows);
    cuda::launch_quantize_qx(x, *storage, stream);
    qx_source = x.data;
    qx_n_in = n_in;
    qx_rows = n_rows;
    return storage;
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() {
    // MVLLM_ATTN_TIMELINE_OUT=prefix (builds with MVLLM_ATTN_TIMELINE): the decode attention's last
    // records, to prefix_model.csv.
    if (const char* tl = std::getenv("MVLLM_ATTN_TIMELINE_OUT"))
        cuda::attention_timeline_dump((std::string(tl) + "_model.csv").c_str());
    // MVLLM_STEP_TIMELINE_OUT=file (builds with MVLLM_STEP_TIMELINE): every kernel's CTAs at the PDL wait.
    if (const char* tl = std::getenv("MVLLM_STEP_TIMELINE_OUT")) cuda::step_timeline_dump(tl);
}

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
    impl->graphs_enabled = options.graphs && cuda::env_on("MVLLM_CUDA_GRAPHS");
    if (const char* e = std::getenv("MVLLM_CUDA_GRAPH_ABLATION")) impl->ablation_at = std::atoll(e);
    const char* timing_env = std::getenv("MVLLM_CUDA_STEP_TIMING");
    if (timing_env && std::string(timing_env) == "1") {
        impl->graph_timing.enabled = true;
        for (int k = 0; k < 2; ++k) {
            MVLLM_CUDA_OK(cudaEventCreate(&impl->graph_timing.start[k]));
            MVLLM_CUDA_OK(cudaEventCreate(&impl->graph_timing.stop[k]));
        }
    }
    if (!cuda::env_on("MVLLM_CUDA_F16_WEIGHTS")) impl->options.f16_weight_copies = false;
    if (const int v = cuda::env_int("MVLLM_QKV_ROPE", -1); v == 0 || v == 1)
        impl->options.qkv_rope_epilogue = v ? CudaBackendOptions::QkvRopeEpilogue::On : CudaBackendOptions::QkvRopeEpilogue::Off;
    if (const int v = cuda::env_int("MVLLM_CUDA_FED_TOKENS", -1); v == 0 || v == 1) impl->options.fed_tokens_on_device = v;
    if (const int v = cuda::env_int("MVLLM_CUDA_PENALTIES", -1); v == 0 || v == 1) impl->options.penalties_on_device = v;
    if (const int v = cuda::env_int("MVLLM_CUDA_BINNED_CUT", -1); v == 0 || v == 1) impl->options.binned_cut = v;
    if (const int v = cuda::env_int("MVLLM_CUDA_DRAW_OUTLINED", -1); v == 0 || v == 1)
        impl->options.draw_score_outlined = v;
    if (const int v = cuda::env_int("MVLLM_CUDA_ROW_SCORES", -1); v == 0 || v == 1) impl->options.scores_targets = v;
    if (const int v = cuda::env_int("MVLLM_CUDA_TOP_SCORES", -1); v == 0 || v == 1) impl->options.scores_rows = v;
    MVLLM_CUDA_OK(cudaSetDevice(options.device));
    cudaDeviceProp prop{};
    MVLLM_CUDA_OK(cudaGetDeviceProperties(&prop, options.device));
    impl->n_sms = prop.multiProcessorCount;
    impl->device_name = prop.name;
    MVLLM_CUDA_OK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
    MVLLM_CUDA_OK(cudaEventCreateWithFlags(&impl->meta_copied, cudaEventDisableTiming));
    for (Impl::ArgmaxSlot& slot : impl->argmax_slots)
        MVLLM_CUDA_OK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    MVLLM_CUDA_OK(cudaStreamCreateWithFlags(&impl->copy_stream, cudaStreamNonBlocking));
    for (cudaEvent_t& e : impl->staged) MVLLM_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    if (cublasCreate(&impl->cublas) != CUBLAS_STATUS_SUCCESS) return make_error("cuBLAS could not be initialised");
    cublasSetStream(impl->cublas, impl->stream);
    // A workspace of our own: cuBLAS then allocates nothing while a decode step is being recorded.
    MVLLM_CUDA_OK(cudaMalloc(&impl->cublas_workspace, Impl::kCublasWorkspaceBytes));
    if (cublasSetWorkspace(impl->cublas, impl->cublas_workspace, Impl::kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS)
        return make_error("cuBLAS rejected its workspace");
    impl->gemm_tuner = std::make_unique<cuda::GemmTuner>(impl->cublas_workspace, Impl::kCublasWorkspaceBytes);
    impl->matmul_scratch.tuner = impl->gemm_tuner.get();
    (void)cuda::gemm_tiles_have_wgmma();  // its one-off probe launch, outside any recorded step
    // The argmax buffers now, so that steps recorded before the first argmax (a warm-up's) point
    // at the fed-token copy every later step uses.
    impl->ensure_argmax(0);
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
    // 16 bytes of slack past the scale plane: the streaming GEMV's bulk copies of a stage's scales
    // end on a 16-byte boundary (weight_layout.h).
    const cudaError_t err = cudaMalloc(&ptr, bytes + cuda::kWeightSlackBytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return make_error("out of GPU memory: weight ", shape_string(host.ne), " ", type_name(host.type), " (",
                          mib(bytes), " MiB) did not fit; ", cuda_memory_report());
    }
    impl_->weights.push_back(ptr);
    if (cuda::split_layout(host.type).split) {
        std::vector<uint8_t> split(bytes);
        cuda::split_rows(host.type, static_cast<const uint8_t*>(host.data), split.data(), host.ne[0], host.n_rows());
        impl_->copy_to_device(ptr, split.data(), bytes);
    } else {
        impl_->copy_to_device(ptr, host.data, bytes);
    }
    TensorView dev = host;
    dev.data = ptr;
    impl_->add_f16_copy(dev);
    return dev;
}

void CudaBackend::Impl::add_f16_copy(const TensorView& w) {
    if (!options.f16_weight_copies || options.batch_invariant || !cuda::gemv_uses_qx(w.type) || w.ne[2] != 1 ||
        w.ne[3] != 1)
        return;
    const size_t bytes = static_cast<size_t>(w.n_elements()) * 2;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || f16_copy_bytes + bytes > total_b / 4 || bytes > free_b / 2) {
        cudaGetLastError();
        return;
    }
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
        cudaGetLastError();
        return;  // the matmul dequantises into scratch instead
    }
    weights.push_back(ptr);
    TensorView f16 = w;
    f16.type = DType::F16;
    f16.data = ptr;
    cuda::launch_dequantize(w, f16, stream);
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
    f16_copies[w.data] = ptr;
    f16_copy_bytes += bytes;
}

const void* CudaBackend::Impl::stacked_f16_copies(const TensorView& gate, const TensorView& up) {
    const auto* g = static_cast<const uint8_t*>(f16_copy(gate));
    const auto* u = static_cast<const uint8_t*>(f16_copy(up));
    if (!g || !u) return nullptr;
    const size_t half = static_cast<size_t>(gate.n_elements()) * 2;
    if (g + half == u) return g;
    if (mode != StepMode::Eager) return nullptr;  // no allocation while a step is recorded
    void* both = nullptr;
    if (cudaMalloc(&both, 2 * half) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;  // two GEMMs instead
    }
    MVLLM_CUDA_OK(cudaMemcpyAsync(both, g, half, cudaMemcpyDeviceToDevice, stream));
    MVLLM_CUDA_OK(cudaMemcpyAsync(static_cast<uint8_t*>(both) + half, u, half, cudaMemcpyDeviceToDevice, stream));
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
    for (const void* old : {static_cast<const void*>(g), static_cast<const void*>(u)}) {
        weights.erase(std::find(weights.begin(), weights.end(), old));
        MVLLM_CUDA_OK(cudaFree(const_cast<void*>(old)));
    }
    weights.push_back(both);
    f16_copies[gate.data] = both;
    f16_copies[up.data] = static_cast<uint8_t*>(both) + half;
    ++arena_generation;  // recorded steps may point at the freed copies
    return both;
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
                          " MiB) did not fit; ", cuda_memory_report());
    }
    MVLLM_CUDA_OK(cudaMemsetAsync(ptr, 0, bytes, impl_->stream));
    MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream));
    return KvCache::wrap(config, ptr, [](void* p) { cudaFree(p); }, /*on_device=*/true);
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
        MVLLM_CHECK(im.mode == StepMode::Eager) << "activation arena grew inside a recorded step";
        ++im.arena_generation;                             // recorded steps point at the old slot
        MVLLM_CUDA_OK(cudaStreamSynchronize(im.stream));  // kernels may still use the old slot
        if (slot.ptr) MVLLM_CUDA_OK(cudaFree(slot.ptr));
        slot.ptr = nullptr;
        slot.bytes = 0;
        if (cudaMalloc(&slot.ptr, need) != cudaSuccess) {
            cudaGetLastError();  // clear the sticky-free allocation error
            slot.ptr = nullptr;
            throw DeviceOutOfMemory(make_error("out of GPU memory: activation ", shape_string(t.ne), " ",
                                               type_name(type), " (", mib(need), " MiB) did not fit; ",
                                               cuda_memory_report())
                                        .message());
        }
        slot.bytes = need;
    }
    t.data = slot.ptr;
    return t;
}

void CudaBackend::embed(const TensorView& table, const TensorView& out) {
    impl_->wrote(out);
    cuda::launch_embed(table, impl_->batch.token_ids, impl_->argmax_fed, out, impl_->stream);
}

void CudaBackend::rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) {
    Impl& im = *impl_;
    im.wrote(out);
    const int64_t width = x.ne[0], n_rows = x.ne[1];
    // Small batches: the norm also writes the QX its consumer GEMVs read (one kernel, not two).
    if (n_rows > 0 && n_rows <= cuda::kGemvMaxTokens && width % 32 == 0 &&
        (x.type == DType::F32 || x.type == DType::F16)) {
        const cuda::QxView qx = cuda::ensure_qx(im.matmul_scratch, width, n_rows);
        cuda::launch_rms_norm_qx(x, weight, eps, out, qx, im.stream);
        im.qx_source = out.data;
        im.qx_n_in = width;
        im.qx_rows = n_rows;
        return;
    }
    cuda::launch_rms_norm(x, weight, eps, out, im.stream);
}

void CudaBackend::matmul(const TensorView& w, const TensorView& x, const TensorView& bias, const TensorView& out) {
    Impl& im = *impl_;
    im.wrote(out);
    cuda::QxView storage;
    const cuda::QxView* qx = im.qx_for(w, x, &storage);
    cuda::launch_matmul(w, im.f16_copy(w), x, bias, out, cuda::GemvEpilogue::Store, qx, im.matmul_scratch, im.cublas,
                        im.stream, im.n_sms, im.options.batch_invariant);
}

void CudaBackend::matmul_add(const TensorView& w, const TensorView& x, const TensorView& acc, const TensorView&) {
    Impl& im = *impl_;
    im.wrote(acc);
    cuda::QxView storage;
    const cuda::QxView* qx = im.qx_for(w, x, &storage);
    cuda::launch_matmul(w, im.f16_copy(w), x, TensorView{}, acc, cuda::GemvEpilogue::Accumulate, qx, im.matmul_scratch,
                        im.cublas, im.stream, im.n_sms, im.options.batch_invariant);
}

void CudaBackend::matmul_swiglu(const TensorView& w_gate, const TensorView& w_up, const TensorView& x,
                                const TensorView& out, const TensorView& scratch) {
    Impl& im = *impl_;
    cuda::QxView storage;
    const bool same = w_gate.type == w_up.type && w_gate.ne == w_up.ne;
    const bool stackable = same && w_gate.ne[1] % 4 == 0;  // the SwiGLU kernel's 16-byte loads
    if (const cuda::QxView* qx = same ? im.qx_for(w_gate, x, &storage) : nullptr) {
        im.wrote(out);
        cuda::launch_gemv_qx_swiglu(w_gate, w_up, *qx, out, im.stream, im.options.batch_invariant);
        return;
    }
    // Larger batches on quantised weights: gate and up as one product (the quantised tile GEMM
    // over both matrices, or cuBLAS over their stacked F16 copies), then SwiGLU.
    const cuda::MatmulPath path =
        cuda::choose_matmul_path(w_gate.type, x.ne[1], im.options.batch_invariant, 2 * w_gate.ne[0] * w_gate.ne[1]);
    const bool tiles = stackable && path == cuda::MatmulPath::GemmTiles;
    const void* stacked = stackable && path == cuda::MatmulPath::GemmF16 ? im.stacked_f16_copies(w_gate, w_up) : nullptr;
    if (!tiles && !stacked) {
        Backend::matmul_swiglu(w_gate, w_up, x, out, scratch);
        return;
    }
    TensorView w = w_gate;
    w.ne[1] = 2 * w_gate.ne[1];
    TensorView gate_up = scratch;
    gate_up.type = DType::F32;
    gate_up.ne = {w.ne[1], x.ne[1], 1, 1};
    im.wrote(gate_up);
    im.wrote(out);
    if (tiles)
        cuda::launch_matmul_stacked(w_gate, w_up, x, gate_up, im.matmul_scratch, im.stream, im.n_sms);
    else
        cuda::launch_matmul(w, stacked, x, TensorView{}, gate_up, cuda::GemvEpilogue::Store, nullptr, im.matmul_scratch,
                            im.cublas, im.stream, im.n_sms, im.options.batch_invariant);
    cuda::launch_silu_mul_stacked(gate_up, out, im.stream);
}

void CudaBackend::rope(const TensorView& x, int32_t n_heads, const RopeParams& rope) {
    Impl& im = *impl_;
    im.wrote(x);
    im.set_inv_freq(rope);
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
    d.n_rows = cache.config().n_blocks * v.n_kv_heads * v.block_size;
    return d;
}
}  // namespace

void CudaBackend::kv_store(KvCache& cache, int32_t layer, const TensorView& k, const TensorView& v) {
    cuda::launch_kv_store(impl_->batch, device_layer(cache, layer), k, v, impl_->stream);
}

void CudaBackend::rope_qk_kv_store(const TensorView& q, const TensorView& k, const TensorView& v, int32_t n_heads,
                                   int32_t n_kv_heads, const RopeParams& rope, KvCache& cache, int32_t layer) {
    Impl& im = *impl_;
    im.wrote(q);
    im.set_inv_freq(rope);
    const cuda::DeviceKvLayer kv = device_layer(cache, layer);
    MVLLM_CHECK(kv.n_kv_heads == n_kv_heads && kv.head_dim == rope.head_dim) << "rope_qk_kv_store geometry";
    cuda::launch_rope_qk_kv_store(im.batch, kv, q, k, v, n_heads, im.inv_freq, im.stream);
}

bool CudaBackend::fuses_qkv_v_apart() const {
    static const bool on = cuda::env_on("MVLLM_QKV_V_APART");
    return on;
}

void CudaBackend::matmul_qkv(const TensorView& wqkv, const TensorView& wv, const TensorView& x,
                             const TensorView& qkv) {
    Impl& im = *impl_;
    cuda::QxView storage;
    const cuda::QxView* qx = wv.data && cuda::qkv_stack_gemv_supported(wqkv, wv, x.ne[1]) && !im.options.batch_invariant
                                 ? im.qx_for(wqkv, x, &storage)
                                 : nullptr;
    if (!qx) {
        Backend::matmul_qkv(wqkv, wv, x, qkv);
        return;
    }
    const auto [qk, v] = qkv_planes(qkv, wqkv, wv, x);
    im.wrote(qkv);
    cuda::launch_qkv_stack_gemv(wqkv, wv, *qx, qk, v, im.stream);
}

void CudaBackend::rope_kv_store(const TensorView& qkv, const TensorView& bias, int32_t n_heads, int32_t n_kv_heads,
                                const RopeParams& rope, const TensorView& q, KvCache& cache, int32_t layer,
                                bool v_apart) {
    Impl& im = *impl_;
    im.wrote(q);
    im.set_inv_freq(rope);
    const cuda::DeviceKvLayer kv = device_layer(cache, layer);
    MVLLM_CHECK(kv.n_kv_heads == n_kv_heads && kv.head_dim == rope.head_dim) << "rope_kv_store geometry";
    cuda::launch_rope_kv_store(im.batch, kv, qkv, bias, n_heads, im.inv_freq, q, v_apart, im.stream);
}

void CudaBackend::matmul_rope_kv_store(const TensorView& wqkv, const TensorView& wv, const TensorView& x,
                                       const TensorView& bias, const TensorView& qkv, int32_t n_heads,
                                       int32_t n_kv_heads, const RopeParams& rope, const TensorView& q, KvCache& cache,
                                       int32_t layer) {
    Impl& im = *impl_;
    cuda::QxView storage;
    const cuda::QxView* qx = im.gemv_takes_rope(wqkv, wv, x) ? im.qx_for(wqkv, x, &storage) : nullptr;
    if (!qx) {
        Backend::matmul_rope_kv_store(wqkv, wv, x, bias, qkv, n_heads, n_kv_heads, rope, q, cache, layer);
        return;
    }
    im.wrote(q);
    im.set_inv_freq(rope);
    const cuda::DeviceKvLayer kv = device_layer(cache, layer);
    MVLLM_CHECK(kv.n_kv_heads == n_kv_heads && kv.head_dim == rope.head_dim) << "matmul_rope_kv_store geometry";
    cuda::launch_qkv_rope_gemv(wqkv, wv, *qx, bias, im.batch, kv, n_heads, im.inv_freq, q, im.stream);
}

void CudaBackend::attention(KvCache& cache, int32_t layer, const TensorView& q, const TensorView& out,
                            int32_t n_heads, float scale) {
    impl_->attention(device_layer(cache, layer), q, out, n_heads, scale, nullptr);
}

cuda::CudaAttention CudaBackend::Impl::attention_variant() const {
    return options.attention == CudaAttentionVariant::Naive     ? cuda::CudaAttention::Naive
           : options.attention == CudaAttentionVariant::Grouped ? cuda::CudaAttention::Grouped
                                                                : cuda::CudaAttention::Fused;
}

void CudaBackend::Impl::attention(const cuda::DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                                  int32_t n_heads, float scale, const cuda::RawQkv* raw) {
    Impl& im = *this;
    const cuda::CudaAttention variant = attention_variant();
    im.wrote(out);
    // Small batches: the decode kernel also writes the QX that the output projection's GEMV reads
    // (as rms_norm does for its consumers), which saves the quantisation kernel. MVLLM_ATTN_QX=0
    // turns this off (for A/B measurements).
    static const bool qx_enabled = cuda::env_on("MVLLM_ATTN_QX");
    const int64_t width = out.ne[0], n_rows = out.ne[1];
    cuda::QxView qx;
    const bool want_qx = qx_enabled && variant == cuda::CudaAttention::Fused && n_rows > 0 &&
                         n_rows <= cuda::kGemvMaxTokens && width % 32 == 0;
    if (want_qx) qx = cuda::ensure_qx(im.matmul_scratch, width, n_rows);
    if (cuda::launch_attention(variant, im.batch, im.seq_ctx_offset, im.total_context, kv, q, out, n_heads, scale,
                               im.attention_scratch, im.n_sms, im.stream, im.options.batch_invariant,
                               want_qx ? &qx : nullptr, raw)) {
        im.qx_source = out.data;
        im.qx_n_in = width;
        im.qx_rows = n_rows;
    }
}

bool CudaBackend::Impl::gemv_takes_rope(const TensorView& wqkv, const TensorView& wv, const TensorView& x) const {
    using Mode = CudaBackendOptions::QkvRopeEpilogue;
    const Mode mode = options.qkv_rope_epilogue;
    return cuda::qkv_rope_gemv_supported(wqkv, wv, x.ne[1]) &&
           (mode == Mode::On || (mode == Mode::Auto && cuda::qkv_rope_gemv_ctas(wqkv, wv, x.ne[1]) >= n_sms));
}

// Where the QKV GEMV's epilogue does not take RoPE (a launch of fewer CTAs than SMs, e.g. the
// 0.5B's), a batch of one new token per sequence has the decode attention kernel rotate q and
// the new K and store the K/V itself: qkv = wqkv x, then one attention kernel, instead of a RoPE +
// K/V store kernel between them.
void CudaBackend::matmul_rope_attention(const TensorView& wqkv, const TensorView& wv, const TensorView& x,
                                        const TensorView& bias, const TensorView& qkv, int32_t n_heads,
                                        int32_t n_kv_heads, const RopeParams& rope, const TensorView& q,
                                        KvCache& cache, int32_t layer, const TensorView& out, float scale) {
    Impl& im = *impl_;
    const cuda::DeviceKvLayer kv = device_layer(cache, layer);
    if (im.gemv_takes_rope(wqkv, wv, x) || !cuda::attention_folds_rope(im.attention_variant(), im.batch, kv)) {
        Backend::matmul_rope_attention(wqkv, wv, x, bias, qkv, n_heads, n_kv_heads, rope, q, cache, layer, out, scale);
        return;
    }
    MVLLM_CHECK(kv.n_kv_heads == n_kv_heads && kv.head_dim == rope.head_dim &&
                qkv.ne[0] == static_cast<int64_t>(n_heads + 2 * n_kv_heads) * rope.head_dim && qkv.type == DType::F32)
        << "matmul_rope_attention geometry";
    MVLLM_CHECK(!bias.data || (bias.type == DType::F32 && bias.ne[0] == qkv.ne[0])) << "matmul_rope_attention bias";
    im.set_inv_freq(rope);
    if (!im.rope_table) im.rope_table = cuda::launch_rope_table(im.batch, im.inv_freq, rope.head_dim, im.attention_scratch, im.stream);
    matmul_qkv(wqkv, wv, x, qkv);
    im.wrote(q);
    const int64_t q_dim = static_cast<int64_t>(n_heads) * rope.head_dim, kv_dim = static_cast<int64_t>(n_kv_heads) * rope.head_dim;
    const cuda::QkvPlanes p = cuda::qkv_planes(static_cast<const float*>(qkv.data), q_dim, kv_dim, x.ne[1], wv.data != nullptr);
    const cuda::RawQkv raw{p.qk, p.v, p.qk_width, p.v_width, static_cast<const float*>(bias.data), im.rope_table};
    im.attention(kv, q, out, n_heads, scale, &raw);
}

void CudaBackend::silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) {
    impl_->wrote(out);
    cuda::launch_silu_mul(gate, up, out, impl_->stream);
}

void CudaBackend::add(const TensorView& acc, const TensorView& x) {
    impl_->wrote(acc);
    cuda::launch_add(acc, x, impl_->stream);
}

void CudaBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
    impl_->wrote(out);
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
    impl_->wrote(x);
    impl_->copy_to_device(x.data, src, x.n_bytes());
}

void CudaBackend::download_kv_layer(KvCache& cache, int32_t layer, void* k_dst, void* v_dst) {
    const KvLayerView v = cache.layer(layer);
    const size_t half = v.offset(cache.config().n_blocks, 0, 0);
    MVLLM_CUDA_OK(cudaMemcpyAsync(k_dst, v.k, half, cudaMemcpyDeviceToHost, impl_->stream));
    MVLLM_CUDA_OK(cudaMemcpyAsync(v_dst, v.v, half, cudaMemcpyDeviceToHost, impl_->stream));
    MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream));
}

void CudaBackend::synchronize() { MVLLM_CUDA_OK(cudaStreamSynchronize(impl_->stream)); }

}  // namespace mvllm
