// The kernels that produce a GEMV's quantised activation (QX, gemv.cuh) from a tensor: the
// quantiser, and RMSNorm fused with it; and the QX buffer's layout. (The decode attention writes
// its output's QX itself, attention_merge.cuh; the block writers are qx.cuh.)
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/qx.cuh"

namespace mvllm::cuda {
namespace {

// Reads x (n_blocks 32-value blocks, one warp each); writes q. Launch: grid ceil(n_blocks / 8), 256.
__global__ void quantize_qx_kernel(const void* x, DType x_type, QxView q, int64_t n_blocks) {
    pdl_begin();
    const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
    if (b >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    write_qx_block(q, b, lane, load_any(x, x_type, b * 32 + lane));
}

// Reads: x row blockIdx.x, weight. Writes: xn row (as rms_norm_kernel) and its QX blocks. A row
// takes gridDim.y CTAs (rms_threads() each): every one computes the row's scale exactly as
// rms_norm_kernel does (the same bits), then quantises its share of the 32-value blocks, so a
// decode step's few rows spread over several SMs instead of one warp walking several blocks.
template <typename XT>
__global__ void rms_norm_qx_kernel(const XT* x, const void* weight, DType weight_type, float eps, void* xn,
                                   DType xn_type, QxView q, int64_t width) {
    pdl_trigger();
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const int64_t n_blocks = width / 32, stride = static_cast<int64_t>(n_warps) * gridDim.y;
    const int64_t first = static_cast<int64_t>(blockIdx.y) * n_warps + warp;
    // The norm weight is no kernel's output: its first value loads before the wait.
    float w = first < n_blocks ? load_any(weight, weight_type, first * 32 + lane) : 0.0f;
    pdl_wait();
    const int64_t base = blockIdx.x * width;
    const float scale = rms_scale(x, base, width, eps, scratch);
    for (int64_t blk = first; blk < n_blocks; blk += stride) {
        const int64_t i = blk * 32 + lane;
        if (blk != first) w = load_any(weight, weight_type, i);
        const float v = round_to(xn_type, load_f(x, base + i) * scale * w);
        store_any(xn, xn_type, base + i, v);
        write_qx_block(q, blockIdx.x * n_blocks + blk, lane, v);
    }
}

}  // namespace

size_t qx_bytes(int64_t n_in, int64_t n_rows) {
    return static_cast<size_t>(n_in * n_rows) * 2 + static_cast<size_t>(n_in / 32 * n_rows) * sizeof(int4);
}

QxView qx_view(void* buffer, int64_t n_in, int64_t n_rows) {
    QxView v;
    auto* p = static_cast<uint8_t*>(buffer);
    v.meta = reinterpret_cast<int4*>(p);  // first: 16-byte aligned
    p += static_cast<size_t>(n_in / 32 * n_rows) * sizeof(int4);
    v.hi = reinterpret_cast<int8_t*>(p);
    v.lo = reinterpret_cast<uint8_t*>(p + n_in * n_rows);
    v.n_in = n_in;
    v.n_rows = n_rows;
    return v;
}

void launch_quantize_qx(const TensorView& x, const QxView& qx, cudaStream_t stream) {
    MVLLM_CHECK(x.ne[0] == qx.n_in && x.ne[1] == qx.n_rows && qx.n_in % 32 == 0) << "quantize_qx shape";
    const int64_t n_blocks = qx.n_in / 32 * qx.n_rows;
    if (n_blocks == 0) return;
    launch_pdl(quantize_qx_kernel, static_cast<unsigned>(ceil_div(n_blocks, 8)), 256, 0, stream, x.data, x.type, qx, n_blocks);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm_qx(const TensorView& x, const TensorView& weight, float eps, const TensorView& xn,
                        const QxView& qx, cudaStream_t stream) {
    MVLLM_CHECK(x.ne[0] == qx.n_in && x.ne[1] == qx.n_rows && qx.n_in % 32 == 0 && xn.ne[0] == x.ne[0])
        << "rms_norm_qx shape";
    if (x.ne[1] == 0) return;
    // A few rows (decode) take one CTA per rms_threads() / 32 blocks each, up to about one CTA per
    // SM in all.
    const int64_t n_blocks = x.ne[0] / 32, rows = x.ne[1];
    const int64_t per_row = rows < 128 ? std::min<int64_t>(ceil_div(n_blocks, rms_threads() / 32), ceil_div(128, rows)) : 1;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(per_row));
    switch (x.type) {
        case DType::F32: launch_pdl(rms_norm_qx_kernel<float>, grid, rms_threads(), 0, stream, static_cast<const float*>(x.data), weight.data, weight.type, eps, xn.data, xn.type, qx, x.ne[0]); break;
        case DType::F16: launch_pdl(rms_norm_qx_kernel<__half>, grid, rms_threads(), 0, stream, static_cast<const __half*>(x.data), weight.data, weight.type, eps, xn.data, xn.type, qx, x.ne[0]); break;
        default: MVLLM_CHECK(false) << "rms_norm_qx input " << type_name(x.type);
    }
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
