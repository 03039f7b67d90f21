#include "backend/cuda/matmul.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/ops.cuh"

namespace mvllm::cuda {
namespace {

constexpr int kGemvWarps = 4;  // output rows per CTA of the fallback float GEMV

// The fallback GEMV for F32 / F16 / BF16 rows whose length is not a multiple of 8 (gemv.cuh
// needs 16-byte pieces): one warp per output row, lanes stride the row's elements.
// Launch: grid ceil(n_out / 4), 128 threads.
template <typename WT, typename XT, int NT>
__global__ void __launch_bounds__(128) gemv_float_scalar_kernel(const WT* w, const XT* x, const float* bias,
                                                                float* out, int64_t n_in, int64_t n_out,
                                                                int n_tokens, int accumulate) {
    pdl_begin();
    const int lane = threadIdx.x & 31;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
    if (row >= n_out) return;
    const WT* wr = w + row * n_in;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int64_t i = lane; i < n_in; i += 32) {
        const float wv = load_f(wr, i);
#pragma unroll
        for (int t = 0; t < NT; ++t)
            if (t < n_tokens) acc[t] += wv * load_f(x, t * n_in + i);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float s = warp_sum(acc[t]) + (bias ? bias[row] : 0.0f);
        if (lane == 0 && t < n_tokens) out[t * n_out + row] = accumulate ? out[t * n_out + row] + s : s;
    }
}

// Reads: W (quantised). Writes: out [n_out][n_in] (f16 or f32). One thread per 32-value chunk,
// grid-stride over all chunks of the matrix.
template <DType T, typename OT>
__global__ void dequantize_kernel(QuantMatrix w, OT* out, int64_t n_in, int64_t n_rows) {
    pdl_begin();
    const int64_t chunks_per_row = n_in / kChunk;
    const int64_t total = chunks_per_row * n_rows;
    for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
         g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t row = g / chunks_per_row, c = g % chunks_per_row;
        float v[kChunk];
        dequant_chunk<T>(w, row, c, v);
        OT* o = out + row * n_in + c * kChunk;
#pragma unroll
        for (int i = 0; i < kChunk; ++i) store_f(o, i, v[i]);
    }
}

template <typename XT>
void gemv_float_scalar(const TensorView& w, const XT* x, const float* bias, float* out, int n_tokens, int accumulate,
                       cudaStream_t stream) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1];
    const unsigned grid = static_cast<unsigned>(ceil_div(n_out, kGemvWarps));
    MVLLM_CHECK(n_tokens <= 8) << "fallback GEMV columns";
    switch (w.type) {
        case DType::F32: launch_pdl(gemv_float_scalar_kernel<float, XT, 8>, grid, 128, 0, stream, static_cast<const float*>(w.data), x, bias, out, n_in, n_out, n_tokens, accumulate); break;
        case DType::F16: launch_pdl(gemv_float_scalar_kernel<__half, XT, 8>, grid, 128, 0, stream, static_cast<const __half*>(w.data), x, bias, out, n_in, n_out, n_tokens, accumulate); break;
        case DType::BF16: launch_pdl(gemv_float_scalar_kernel<__nv_bfloat16, XT, 8>, grid, 128, 0, stream, static_cast<const __nv_bfloat16*>(w.data), x, bias, out, n_in, n_out, n_tokens, accumulate); break;
        default: MVLLM_CHECK(false) << "matmul: weight type " << type_name(w.type);
    }
}

void ensure(void** ptr, size_t* have, size_t need) { grow_device_buffer(ptr, have, need, "matmul scratch"); }

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The quantised tile GEMM: x converted to F16 if needed, the K-split scratch grown (and zeroed).
void matmul_tiles(const TensorView& w, const TensorView* w2, const TensorView& x, const float* bias, float* out,
                  bool accumulate, MatmulScratch& scratch, cudaStream_t stream, int32_t n_sms) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1] + (w2 ? w2->ne[1] : 0), n_tokens = x.ne[1];
    TensorView xh = x;
    if (x.type != DType::F16) {
        ensure(&scratch.input, &scratch.input_bytes, static_cast<size_t>(n_in * n_tokens) * 2);
        xh.type = DType::F16;
        xh.data = scratch.input;
        launch_convert(x, xh, stream);
    }
    const size_t partial_bytes = gemm_tiles_scratch_bytes(w.type, n_in, n_out, n_tokens, n_sms);
    if (partial_bytes > scratch.partial_bytes) {  // a new buffer: its K-split counters start at zero
        ensure(&scratch.partial, &scratch.partial_bytes, partial_bytes);
        MVLLM_CUDA_CHECK(cudaMemsetAsync(scratch.partial, 0, scratch.partial_bytes, stream));
    }
    launch_gemm_tiles(w, xh, bias, out, accumulate, scratch.partial, n_sms, stream, nullptr, w2);
}

}  // namespace

bool cuda_weight_type_supported(DType type) {
    switch (type) {
        case DType::F32: case DType::F16: case DType::BF16:
        case DType::Q8_0: case DType::Q4_0: case DType::Q4_K: case DType::Q6_K: return true;
        default: return false;
    }
}

// The tile GEMM's rule: {max rows, min weights}. The default, or MVLLM_GEMM_TILES_MAX_ROWS=N
// (N rows, any size) or =N:M (N rows, matrices of at least M x 2^20 weights).
struct TilesRule {
    std::atomic<int64_t> max_tokens, min_weights;
};
TilesRule& tiles_rule() {
    static TilesRule r = [] {
        const char* forced = std::getenv("MVLLM_GEMM_TILES_MAX_ROWS");
        if (!forced) return TilesRule{kGemmTilesMaxTokens, kGemmTilesMinWeights};
        const char* colon = std::strchr(forced, ':');
        return TilesRule{std::max<int64_t>(0, std::atoll(forced)),
                         colon ? std::max<int64_t>(0, std::atoll(colon + 1)) << 20 : 0};
    }();
    return r;
}

int64_t gemm_tiles_max_tokens() { return tiles_rule().max_tokens.load(); }
int64_t gemm_tiles_min_weights() { return tiles_rule().min_weights.load(); }
void set_gemm_tiles_max_tokens(int64_t n, int64_t min_weights) {
    tiles_rule().max_tokens.store(std::max<int64_t>(0, n));
    tiles_rule().min_weights.store(std::max<int64_t>(0, min_weights));
}

MatmulPath choose_matmul_path(DType weight_type, int64_t n_tokens, bool batch_invariant, int64_t n_weights) {
    if (batch_invariant || n_tokens <= kGemvMaxTokens) return MatmulPath::Gemv;
    const TilesRule& tiles = tiles_rule();
    if (gemm_tiles_supported(weight_type) && n_tokens <= tiles.max_tokens.load() && n_weights >= tiles.min_weights.load())
        return MatmulPath::GemmTiles;
    if (weight_type == DType::F32 || weight_type == DType::BF16) return MatmulPath::GemmF32;
    return MatmulPath::GemmF16;
}

const char* matmul_path_name(MatmulPath path) {
    switch (path) {
        case MatmulPath::Gemv: return "gemv";
        case MatmulPath::GemmTiles: return "gemm-tiles";
        case MatmulPath::GemmF16: return "gemm-f16";
        case MatmulPath::GemmF32: return "gemm-f32";
    }
    return "?";
}

MatmulScratch::~MatmulScratch() {
    if (weight) cudaFree(weight);
    if (input) cudaFree(input);
    if (qx) cudaFree(qx);
    if (partial) cudaFree(partial);
}

void launch_dequantize(const TensorView& w, const TensorView& out, cudaStream_t stream) {
    MVLLM_CHECK(out.type == DType::F16 || out.type == DType::F32) << "dequantize output";
    MVLLM_CHECK(out.n_elements() == w.n_elements()) << "dequantize shape";
    if (is_float_type(w.type)) {
        launch_convert(w, out, stream);
        return;
    }
    const int64_t n_in = w.ne[0], n_rows = w.n_rows();
    const int64_t chunks = n_in / kChunk * n_rows;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(ceil_div(chunks, 256), 8192));
#define MVLLM_DEQ(T)                                                                                      \
    if (out.type == DType::F16)                                                                           \
        launch_pdl(dequantize_kernel<T, __half>, grid, 256, 0, stream, quant_matrix<T>(w.data, n_in, n_rows),     \
                                                              static_cast<__half*>(out.data), n_in, n_rows); \
    else                                                                                                  \
        launch_pdl(dequantize_kernel<T, float>, grid, 256, 0, stream, quant_matrix<T>(w.data, n_in, n_rows),      \
                                                             static_cast<float*>(out.data), n_in, n_rows);
    switch (w.type) {
        case DType::Q8_0: MVLLM_DEQ(DType::Q8_0) break;
        case DType::Q4_0: MVLLM_DEQ(DType::Q4_0) break;
        case DType::Q4_K: MVLLM_DEQ(DType::Q4_K) break;
        case DType::Q6_K: MVLLM_DEQ(DType::Q6_K) break;
        default: MVLLM_CHECK(false) << "dequantize: weight type " << type_name(w.type);
    }
#undef MVLLM_DEQ
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_matmul_stacked(const TensorView& w1, const TensorView& w2, const TensorView& x, const TensorView& out,
                           MatmulScratch& scratch, cudaStream_t stream, int32_t n_sms) {
    MVLLM_CHECK(choose_matmul_path(w1.type, x.ne[1], false, w1.ne[0] * (w1.ne[1] + w2.ne[1])) == MatmulPath::GemmTiles &&
                w2.type == w1.type &&
                w2.ne[0] == w1.ne[0] && x.ne[0] == w1.ne[0] && out.type == DType::F32 &&
                out.ne[0] == w1.ne[1] + w2.ne[1] && out.ne[1] == x.ne[1])
        << "stacked matmul: w " << shape_string(w1.ne) << " + " << shape_string(w2.ne) << " x " << shape_string(x.ne);
    if (x.ne[1] == 0) return;
    matmul_tiles(w1, &w2, x, nullptr, static_cast<float*>(out.data), false, scratch, stream, n_sms);
}

QxView ensure_qx(MatmulScratch& scratch, int64_t n_in, int64_t n_rows) {
    ensure(&scratch.qx, &scratch.qx_bytes, qx_bytes(n_in, n_rows));
    return qx_view(scratch.qx, n_in, n_rows);
}

void launch_matmul(const TensorView& w, const void* w_f16, const TensorView& x, const TensorView& bias, const TensorView& out,
                   GemvEpilogue epilogue, const QxView* qx, MatmulScratch& scratch, cublasHandle_t cublas,
                   cudaStream_t stream, int32_t n_sms, bool batch_invariant) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1], n_tokens = x.ne[1];
    MVLLM_CHECK(x.ne[0] == n_in && out.ne[0] == n_out && out.ne[1] == n_tokens && out.type == DType::F32)
        << "matmul shapes: w " << shape_string(w.ne) << " x " << shape_string(x.ne) << " out " << shape_string(out.ne);
    MVLLM_CHECK(x.type == DType::F32 || x.type == DType::F16) << "matmul input " << type_name(x.type);
    if (n_tokens == 0) return;
    const float* bias_p = bias.data ? static_cast<const float*>(bias.data) : nullptr;
    MVLLM_CHECK(!bias.data || bias.type == DType::F32) << "bias type";
    const bool accumulate = epilogue == GemvEpilogue::Accumulate;
    float* o = static_cast<float*>(out.data);
    const MatmulPath path = choose_matmul_path(w.type, n_tokens, batch_invariant, n_in * n_out);
    if (path == MatmulPath::Gemv) {
        // Any row count (batch-invariant mode): the GEMV launchers run slices of kGemvMaxColumns.
        if (gemv_uses_qx(w.type)) {
            MVLLM_CHECK(n_in % kChunk == 0) << "quantised row of " << n_in;
            QxView q;
            if (qx) {
                MVLLM_CHECK(qx->n_in == n_in && qx->n_rows == n_tokens) << "matmul: prepared QX shape";
                q = *qx;
            } else {
                q = ensure_qx(scratch, n_in, n_tokens);
                launch_quantize_qx(x, q, stream);
            }
            launch_gemv_qx(w, q, bias, out, epilogue, stream, batch_invariant);
        } else if (n_in % 8 == 0) {
            launch_gemv_float(w, x, bias, out, epilogue, stream);
        } else {
            for (int64_t t0 = 0; t0 < n_tokens; t0 += kGemvMaxTokens) {
                const int nt = static_cast<int>(std::min<int64_t>(kGemvMaxTokens, n_tokens - t0));
                if (x.type == DType::F32)
                    gemv_float_scalar(w, static_cast<const float*>(x.data) + t0 * n_in, bias_p, o + t0 * n_out, nt,
                                      accumulate, stream);
                else
                    gemv_float_scalar(w, static_cast<const __half*>(x.data) + t0 * n_in, bias_p, o + t0 * n_out, nt,
                                      accumulate, stream);
            }
        }
        MVLLM_CUDA_LAUNCH_CHECK();
        return;
    }
    if (path == MatmulPath::GemmTiles) {
        matmul_tiles(w, nullptr, x, bias_p, o, accumulate, scratch, stream, n_sms);
        return;
    }
    // GEMM: column-major view, C[n_out x n_tokens] = W^T(op) [n_out x n_in] * X [n_in x n_tokens].
    // Accumulate: beta = 1 adds the product to out; a bias is added by a separate kernel.
    const DType op_type = path == MatmulPath::GemmF16 ? DType::F16 : DType::F32;
    const cudaDataType_t cuda_type = op_type == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
    const size_t elem = op_type == DType::F16 ? 2 : 4;
    const void* wp = w.data;
    if (w_f16 && op_type == DType::F16) {
        wp = w_f16;
    } else if (w.type != op_type) {
        ensure(&scratch.weight, &scratch.weight_bytes, static_cast<size_t>(n_in * n_out) * elem);
        TensorView wd = w;
        wd.type = op_type;
        wd.data = scratch.weight;
        launch_dequantize(w, wd, stream);
        wp = scratch.weight;
    }
    const void* xp = x.data;
    if (x.type != op_type) {
        ensure(&scratch.input, &scratch.input_bytes, static_cast<size_t>(n_in * n_tokens) * elem);
        TensorView xd = x;
        xd.type = op_type;
        xd.data = scratch.input;
        launch_convert(x, xd, stream);
        xp = scratch.input;
    }
    if (op_type == DType::F16 && scratch.tuner &&
        scratch.tuner->gemm(wp, xp, o, n_out, n_in, n_tokens, accumulate, stream)) {
        if (bias_p) launch_add_bias(out, bias, stream);
        return;
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const cublasStatus_t st =
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out), static_cast<int>(n_tokens),
                     static_cast<int>(n_in), &alpha, wp, cuda_type, static_cast<int>(n_in), xp, cuda_type,
                     static_cast<int>(n_in), &beta, o, CUDA_R_32F, static_cast<int>(n_out), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    MVLLM_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmEx failed: " << static_cast<int>(st);
    if (bias_p) launch_add_bias(out, bias, stream);
}

}  // namespace mvllm::cuda
