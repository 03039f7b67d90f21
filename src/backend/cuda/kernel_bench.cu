#include "backend/cuda/kernel_bench.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/weight_layout.h"

namespace mvllm::cuda {
namespace {

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return static_cast<uint32_t>(x);
}

// A random f16 bit pattern of magnitude in [lo, 2 lo) (sign random).
__device__ __forceinline__ uint16_t random_half(uint64_t i, uint32_t seed, float lo) {
    const uint32_t h = hash32(i, seed);
    const float v = lo * (1.0f + (h & 0xFFFF) / 65536.0f) * ((h >> 31) ? -1.0f : 1.0f);
    return __half_as_ushort(__float2half_rn(v));
}

// Random bytes over n 4-byte words. Grid-stride.
__global__ void fill_random_kernel(uint32_t* p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        p[i] = hash32(static_cast<uint64_t>(i), seed);
}

// Sane f16 values at n positions base + i * stride (scales, or every element of an F16 matrix).
__global__ void fill_halves_kernel(uint8_t* base, int64_t n, int64_t stride, float lo, uint32_t seed) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint16_t h = random_half(static_cast<uint64_t>(i), seed, lo);
        base[i * stride] = static_cast<uint8_t>(h & 0xFF);
        base[i * stride + 1] = static_cast<uint8_t>(h >> 8);
    }
}

// Random BF16 values in (-1, 1).
__global__ void fill_bf16_kernel(__nv_bfloat16* p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        p[i] = __float2bfloat16_rn(static_cast<int32_t>(hash32(static_cast<uint64_t>(i), seed)) * 4.6566e-10f);
}

// Random normal-ish floats (sum of two uniforms).
__global__ void fill_floats_kernel(float* p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint32_t h = hash32(static_cast<uint64_t>(i), seed);
        p[i] = ((h & 0xFFFF) + (h >> 16)) / 65536.0f - 1.0f;
    }
}

// Reads n 16-byte words; writes one word per thread only if the xor is a magic value (never in
// practice), so the loads cannot be removed. Grid-stride.
__global__ void read_kernel(const uint4* p, int64_t n, uint4* sink) {
    uint32_t acc = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) sink[0] = make_uint4(acc, 0, 0, 0);
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, 256), 1, 132 * 16)); }

// Fills one device matrix of `type` (device layout) with random content and sane scales.
void fill_weight(DType type, uint8_t* p, int64_t n_in, int64_t n_out, uint32_t seed, cudaStream_t s) {
    const size_t bytes = row_size(type, n_in) * static_cast<size_t>(n_out);
    if (type == DType::BF16) {
        fill_bf16_kernel<<<grid_for(n_in * n_out), 256, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(p), n_in * n_out, seed);
        return;
    }
    fill_random_kernel<<<grid_for(static_cast<int64_t>(bytes / 4)), 256, 0, s>>>(reinterpret_cast<uint32_t*>(p),
                                                                                   static_cast<int64_t>(bytes / 4), seed);
    if (type == DType::F16) {
        fill_halves_kernel<<<grid_for(n_in * n_out), 256, 0, s>>>(p, n_in * n_out, 2, 0.25f, seed + 1);
        return;
    }
    const SplitLayout l = split_layout(type);
    if (l.split) {  // the scale plane's d (and Q4_K's dmin after it)
        const int64_t n_blocks = n_in / l.block_values * n_out;
        uint8_t* scales = p + n_blocks * l.body_bytes;
        fill_halves_kernel<<<grid_for(n_blocks), 256, 0, s>>>(scales, n_blocks, l.scale_bytes, 1.0f / 512, seed + 1);
        if (type == DType::Q4_K)
            fill_halves_kernel<<<grid_for(n_blocks), 256, 0, s>>>(scales + 2, n_blocks, 16, 1.0f / 1024, seed + 2);
    }
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    MVLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Events {
    cudaEvent_t a = nullptr, b = nullptr;
    Events() {
        MVLLM_CUDA_CHECK(cudaEventCreate(&a));
        MVLLM_CUDA_CHECK(cudaEventCreate(&b));
    }
    ~Events() {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
    }
};

// Median over `reps` of the time of fn() (ms), after 3 warm-up runs.
template <typename Fn>
double time_ms(cudaStream_t s, int reps, Fn&& fn) {
    Events e;
    for (int i = 0; i < 3; ++i) fn();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        MVLLM_CUDA_CHECK(cudaEventRecord(e.a, s));
        fn();
        MVLLM_CUDA_CHECK(cudaEventRecord(e.b, s));
        MVLLM_CUDA_CHECK(cudaEventSynchronize(e.b));
        t.push_back(elapsed_ms(e.a, e.b));
    }
    return median(t);
}

// Times fn once per copy inside one CUDA graph; returns the median time per call in µs.
template <typename Fn>
double graph_us(cudaStream_t s, int n_copies, int replays, Fn&& fn) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    MVLLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int c = 0; c < n_copies; ++c) fn(c);
    MVLLM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    MVLLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = time_ms(s, replays, [&] { MVLLM_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms * 1000.0 / n_copies;
}

std::vector<float> to_host(const float* d, size_t n, cudaStream_t s) {
    std::vector<float> h(n);
    MVLLM_CUDA_CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    MVLLM_CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
}

// The GEMM comparison: per shape, type and token count, cuBLAS on F16 copies of the weights
// (the matmul path's default beyond the GEMV) and every tile-GEMM variant on the quantised
// weights, each over enough copies that the weights come from HBM; every variant's output is
// compared with cuBLAS's on the same (dequantised) values.
Status run_gemm_cases(const KernelBenchOptions& o, KernelBenchReport& report, cudaStream_t s, uint32_t& seed) {
    cublasHandle_t cublas;
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return make_error("bench kernels: cublasCreate failed");
    void* workspace = nullptr;
    const size_t workspace_bytes = size_t{32} << 20;
    MVLLM_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
    cublasSetStream(cublas, s);
    cublasSetWorkspace(cublas, workspace, workspace_bytes);
    const int max_tokens = *std::max_element(o.gemm_tokens.begin(), o.gemm_tokens.end());
    Status status;
    for (const auto& [n_in, n_out] : o.shapes) {
        for (DType type : o.gemm_types) {
            if (!gemm_tiles_supported(type) || n_in % type_traits(type).block_size != 0) continue;
            const size_t q_bytes = row_size(type, n_in) * static_cast<size_t>(n_out);
            const size_t h_bytes = size_t{2} * n_in * n_out;
            const int n_q = static_cast<int>(std::clamp<size_t>((size_t{400} << 20) / q_bytes + 1, 2, 32));
            const int n_h = static_cast<int>(std::clamp<size_t>((size_t{400} << 20) / h_bytes + 1, 2, 32));
            size_t partial_bytes = 0;
            for (const GemmTilesVariant& v : gemm_tiles_variants())
                for (int nt : o.gemm_tokens)
                    partial_bytes =
                        std::max(partial_bytes, gemm_tiles_scratch_bytes(type, n_in, n_out, nt, report.n_sms, &v));
            uint8_t *q = nullptr, *h = nullptr;
            __half* x = nullptr;
            float *out = nullptr, *partial = nullptr;
            if (cudaMalloc(&q, q_bytes * n_q) != cudaSuccess || cudaMalloc(&h, h_bytes * n_h) != cudaSuccess ||
                cudaMalloc(&x, size_t{2} * n_in * max_tokens) != cudaSuccess ||
                cudaMalloc(&out, sizeof(float) * n_out * max_tokens) != cudaSuccess ||
                (partial_bytes && cudaMalloc(&partial, std::max<size_t>(partial_bytes, 4)) != cudaSuccess)) {
                cudaGetLastError();
                status = make_error("bench kernels: the GEMM operands of ", n_in, "x", n_out, " did not fit");
            }
            auto weight = [&](int c, bool f16) {
                TensorView w;
                w.type = f16 ? DType::F16 : type;
                w.ne = {n_in, n_out, 1, 1};
                w.data = f16 ? h + c * h_bytes : q + c * q_bytes;
                return w;
            };
            if (status.is_ok()) {
                if (partial) MVLLM_CUDA_CHECK(cudaMemsetAsync(partial, 0, partial_bytes, s));  // K-split counters
                for (int c = 0; c < n_q; ++c) fill_weight(type, q + c * q_bytes, n_in, n_out, seed++, s);
                for (int c = 0; c < n_h; ++c) launch_dequantize(weight(c % n_q, false), weight(c, true), s);
                fill_halves_kernel<<<grid_for(n_in * max_tokens), 256, 0, s>>>(reinterpret_cast<uint8_t*>(x),
                                                                               n_in * max_tokens, 2, 0.5f, seed++);
                MVLLM_CUDA_LAUNCH_CHECK();
            }
            for (int nt : o.gemm_tokens) {
                if (!status.is_ok()) break;
                TensorView xv;
                xv.type = DType::F16;
                xv.ne = {n_in, nt, 1, 1};
                xv.data = x;
                const double flops = 2.0 * n_in * n_out * nt;
                auto cublas_gemm = [&](int c) {
                    const float alpha = 1.0f, beta = 0.0f;
                    const cublasStatus_t st = cublasGemmEx(
                        cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out), nt, static_cast<int>(n_in), &alpha,
                        h + c * h_bytes, CUDA_R_16F, static_cast<int>(n_in), x, CUDA_R_16F, static_cast<int>(n_in),
                        &beta, out, CUDA_R_32F, static_cast<int>(n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                    MVLLM_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmEx failed: " << static_cast<int>(st);
                };
                cublas_gemm(0);
                const std::vector<float> ref = to_host(out, static_cast<size_t>(n_out) * nt, s);
                float ref_max = 0;
                for (float v : ref)  // a NaN makes ref_max NaN (std::max would drop it)
                    if (!(std::fabs(v) <= ref_max)) ref_max = std::fabs(v);
                GemmBenchCase c;
                c.type = type;
                c.n_in = n_in;
                c.n_out = n_out;
                c.n_tokens = nt;
                c.kernel = "cublas-f16";
                c.us = graph_us(s, n_h, o.replays, cublas_gemm);
                c.tflops = flops / (c.us * 1e6);
                c.weight_gbps = h_bytes / (c.us * 1e3);
                report.gemm_cases.push_back(c);
                for (const GemmTilesVariant& v : gemm_tiles_variants()) {
                    auto tiles = [&](int copy) {
                        launch_gemm_tiles(weight(copy, false), xv, nullptr, out, false, partial, report.n_sms, s, &v);
                    };
                    MVLLM_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * n_out * nt, s));
                    tiles(0);
                    const std::vector<float> got = to_host(out, static_cast<size_t>(n_out) * nt, s);
                    double err = 0;
                    for (size_t i = 0; i < got.size(); ++i)
                        if (const double d = std::fabs(got[i] - ref[i]); !(d <= err)) err = d;  // NaN sticks
                    c.kernel = gemm_tiles_variant_name(v);
                    c.us = graph_us(s, n_q, o.replays, tiles);
                    c.tflops = flops / (c.us * 1e6);
                    c.weight_gbps = q_bytes / (c.us * 1e3);
                    c.rel_err = ref_max > 0 ? err / ref_max : err;
                    report.gemm_cases.push_back(c);
                }
            }
            cudaFree(q);
            cudaFree(h);
            cudaFree(x);
            cudaFree(out);
            cudaFree(partial);
            if (!status.is_ok()) break;
        }
        if (!status.is_ok()) break;
    }
    cudaFree(workspace);
    cublasDestroy(cublas);
    return status;
}

}  // namespace

Result<KernelBenchReport> run_kernel_bench(const KernelBenchOptions& o) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        cudaGetLastError();
        return make_error("bench kernels needs a CUDA device");
    }
    KernelBenchReport report;
    cudaDeviceProp prop{};
    MVLLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    report.device = prop.name;
    report.n_sms = prop.multiProcessorCount;
    cudaStream_t s;
    MVLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // Ceilings: a 1 GiB device-to-device copy (read + write) and a 1 GiB read-only kernel.
    {
        const size_t bytes = size_t{1} << 30;
        void *a = nullptr, *b = nullptr;
        MVLLM_CUDA_CHECK(cudaMalloc(&a, bytes));
        MVLLM_CUDA_CHECK(cudaMalloc(&b, bytes));
        fill_random_kernel<<<grid_for(bytes / 4), 256, 0, s>>>(static_cast<uint32_t*>(a), bytes / 4, 1);
        const double copy_ms =
            time_ms(s, 10, [&] { MVLLM_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
        report.copy_gbps = 2.0 * bytes / (copy_ms * 1e6);
        const double read_ms = time_ms(s, 10, [&] {
            read_kernel<<<report.n_sms * 8, 512, 0, s>>>(static_cast<const uint4*>(a), bytes / 16,
                                                         static_cast<uint4*>(b));
        });
        report.read_gbps = bytes / (read_ms * 1e6);
        MVLLM_CUDA_CHECK(cudaFree(a));
        MVLLM_CUDA_CHECK(cudaFree(b));
    }

    uint32_t seed = 11;
    for (const auto& [n_in, n_out] : o.shapes) {
        for (DType type : o.types) {
            if (n_in % type_traits(type).block_size != 0) continue;  // e.g. a K-quant on a 896-wide row
            const size_t w_bytes = row_size(type, n_in) * static_cast<size_t>(n_out);
            const int n_copies = static_cast<int>(std::clamp<size_t>((size_t{400} << 20) / w_bytes + 1, 2, 64));
            uint8_t* weights = nullptr;
            if (cudaMalloc(&weights, w_bytes * n_copies + kWeightSlackBytes) != cudaSuccess) {
                cudaGetLastError();
                return make_error("bench kernels: ", n_copies, " copies of ", type_name(type), " ", n_in, "x", n_out,
                                  " did not fit");
            }
            for (int c = 0; c < n_copies; ++c) fill_weight(type, weights + c * w_bytes, n_in, n_out, seed++, s);
            const int max_tokens = *std::max_element(o.n_tokens.begin(), o.n_tokens.end());
            float *x = nullptr, *out = nullptr;
            void* qx_buf = nullptr;
            MVLLM_CUDA_CHECK(cudaMalloc(&x, n_in * max_tokens * sizeof(float)));
            MVLLM_CUDA_CHECK(cudaMalloc(&out, n_out * max_tokens * sizeof(float)));
            MVLLM_CUDA_CHECK(cudaMalloc(&qx_buf, qx_bytes(n_in, max_tokens)));
            fill_floats_kernel<<<grid_for(n_in * max_tokens), 256, 0, s>>>(x, n_in * max_tokens, seed++);
            MVLLM_CUDA_LAUNCH_CHECK();
            for (int nt : o.n_tokens) {
                TensorView xv;
                xv.type = DType::F32;
                xv.ne = {n_in, nt, 1, 1};
                xv.data = x;
                TensorView ov;
                ov.type = DType::F32;
                ov.ne = {n_out, nt, 1, 1};
                ov.data = out;
                const bool integer = gemv_uses_qx(type);
                const QxView qx = qx_view(qx_buf, n_in, nt);
                if (integer) launch_quantize_qx(xv, qx, s);
                // One graph: the GEMV over every copy of the weights.
                const double us = graph_us(s, n_copies, o.replays, [&](int copy) {
                    TensorView w;
                    w.type = type;
                    w.ne = {n_in, n_out, 1, 1};
                    w.data = weights + copy * w_bytes;
                    if (integer) launch_gemv_qx(w, qx, TensorView{}, ov, GemvEpilogue::Store, s);
                    else launch_gemv_float(w, xv, TensorView{}, ov, GemvEpilogue::Store, s);
                });
                GemvBenchCase c;
                c.type = type;
                c.n_in = n_in;
                c.n_out = n_out;
                c.n_tokens = nt;
                c.us = us;
                c.weight_bytes = static_cast<double>(w_bytes);
                const double x_bytes = integer ? static_cast<double>(qx_bytes(n_in, nt)) : 4.0 * n_in * nt;
                c.bytes = c.weight_bytes + x_bytes + 4.0 * n_out * nt;
                c.gbps = c.bytes / (c.us * 1e3);
                c.pct_of_copy = 100.0 * c.gbps / report.copy_gbps;
                report.cases.push_back(c);
            }
            MVLLM_CUDA_CHECK(cudaFree(weights));
            MVLLM_CUDA_CHECK(cudaFree(x));
            MVLLM_CUDA_CHECK(cudaFree(out));
            MVLLM_CUDA_CHECK(cudaFree(qx_buf));
        }
    }
    if (!o.gemm_tokens.empty()) {
        const Status st = run_gemm_cases(o, report, s, seed);
        if (!st.is_ok()) return st;
    }
    MVLLM_CUDA_CHECK(cudaStreamDestroy(s));
    return report;
}

}  // namespace mvllm::cuda
