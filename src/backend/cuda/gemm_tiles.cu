#include "backend/cuda/gemm_tiles.cuh"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace mvllm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRows = 16 * kWarps;  // rows of W per CTA: one m16 tile per warp
constexpr int kTokens = 64;         // token columns per CTA: eight n8 tiles
constexpr int kStep = 128;          // values of K staged per step (4 quantisation blocks)
constexpr int kStride = kStep + 8;  // halfs per staged token row: 272 B, so ldmatrix rows hit distinct banks

// Two weights as the F16 pair {lo, hi} = d * {q0, q1}: the integers are placed in the mantissa
// of 1024 (0x6400) and the offset subtracted exactly, then one rounded multiply by d.
__device__ __forceinline__ uint32_t scale_pair(uint32_t magic_bits, __half2 offset, __half2 d) {
    const __half2 q = __hsub2(*reinterpret_cast<const __half2*>(&magic_bits), offset);
    const __half2 v = __hmul2(q, d);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// 16 bits of a staged block body starting at byte `byte` (even).
__device__ __forceinline__ uint32_t body16(const uint8_t* body, int byte) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(body + (byte & ~3));
    return (byte & 2) ? w >> 16 : w & 0xFFFF;
}

// One row's quantisation blocks as staged in shared memory, and the A-fragment registers of the
// row for one block: r[s][0] = values {2 tig, 2 tig + 1} and r[s][1] = values {2 tig + 8, 2 tig + 9}
// of k-step s (values 16 s .. 16 s + 15 of the block).
template <DType T>
struct Blocks;

template <>
struct Blocks<DType::Q4_0> {  // value k: low nibble of byte k; value 16 + k: its high nibble
    static constexpr int kBody = 16;
    static __device__ __forceinline__ void fragment(const uint8_t* body, uint16_t d_bits, int tig, uint32_t (&r)[2][2]) {
        const __half2 d = __half2half2(__ushort_as_half(d_bits));
        const __half2 offset = __float2half2_rn(1032.0f);  // 1024 + 8
        const uint32_t v[2] = {body16(body, 2 * tig), body16(body, 2 * tig + 8)};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            r[0][j] = scale_pair(0x64006400u | (v[j] & 0xFu) | ((v[j] & 0xF00u) << 8), offset, d);
            r[1][j] = scale_pair(0x64006400u | ((v[j] >> 4) & 0xFu) | ((v[j] & 0xF000u) << 4), offset, d);
        }
    }
};

template <>
struct Blocks<DType::Q8_0> {  // value k: signed byte k
    static constexpr int kBody = 32;
    static __device__ __forceinline__ void fragment(const uint8_t* body, uint16_t d_bits, int tig, uint32_t (&r)[2][2]) {
        const __half2 d = __half2half2(__ushort_as_half(d_bits));
        const __half2 offset = __float2half2_rn(1152.0f);  // 1024 + 128: q ^ 0x80 = q + 128
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const uint32_t u = body16(body, 16 * s + 8 * j + 2 * tig) ^ 0x8080u;
                r[s][j] = scale_pair(0x64006400u | (u & 0xFFu) | ((u & 0xFF00u) << 8), offset, d);
            }
    }
};

constexpr int kBlocksPerStep = kStep / 32;

// Shared memory of one CTA: two stages of the token tile, the weight tile and its scales.
template <DType T>
struct Stage {
    static constexpr int kWStride = kBlocksPerStep * Blocks<T>::kBody + 16;  // bytes per staged row (+16: banks)
    __half x[kTokens][kStride];
    uint8_t w[kRows][kWStride];
    uint16_t d[kRows][kBlocksPerStep];
};

// Reads: W rows blockIdx.x * kRows .. + kRows, x rows blockIdx.y * kTokens .. + kTokens, over the
// chunks of K slice blockIdx.z (chunks_per_slice each). Writes: out (one slice: the epilogue with
// bias and accumulate) or partial[blockIdx.z] (several). Launch: 256 threads, 2 * sizeof(Stage<T>)
// bytes of dynamic shared memory. Each step stages the next chunk (x and W by cp.async, the
// scales through registers) while the warps multiply the current one.
template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    gemm_tiles_kernel(QuantMatrix w, const __half* x, int64_t n_in, int64_t n_out, int n_tokens,
                      int64_t chunks_per_slice, const float* bias, float* out, int accumulate, float* partial) {
    using B = Blocks<T>;
    extern __shared__ __align__(16) uint8_t shared_raw[];
    Stage<T>* st = reinterpret_cast<Stage<T>*>(shared_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int64_t cta_row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t row0 = cta_row0 + warp * 16;
    const int t0 = blockIdx.y * kTokens;
    const int64_t n_blocks = n_in / 32;
    const int64_t c_begin = blockIdx.z * chunks_per_slice;
    const int64_t c_end = min(c_begin + chunks_per_slice, (n_in + kStep - 1) / kStep);
    // Thread r < kRows carries the scales of staged row r from one step to the next.
    const int64_t my_row = min(cta_row0 + threadIdx.x, n_out - 1);
    uint16_t scales[kBlocksPerStep];

    auto stage = [&](int64_t c, int buf) {
        for (int p = threadIdx.x; p < kTokens * (kStep / 8); p += kWarps * 32) {  // 64 rows x 16 pieces
            const int tok = p / (kStep / 8), piece = p % (kStep / 8);
            const int64_t k = c * kStep + piece * 8;
            const bool valid = t0 + tok < n_tokens && k < n_in;
            cp_async16(&st[buf].x[tok][piece * 8], valid ? x + static_cast<int64_t>(t0 + tok) * n_in + k : x, valid);
        }
        constexpr int kPieces = kBlocksPerStep * B::kBody / 16;  // 16-byte pieces of a row's chunk
        for (int p = threadIdx.x; p < kRows * kPieces; p += kWarps * 32) {
            const int r = p / kPieces, piece = p % kPieces;
            const int64_t blk = c * kBlocksPerStep + piece * 16 / B::kBody;
            const bool valid = blk < n_blocks;
            const int64_t row = min(cta_row0 + r, n_out - 1);
            const uint8_t* src = w.body + (row * w.blocks_per_row + c * kBlocksPerStep) * B::kBody + piece * 16;
            cp_async16(&st[buf].w[r][piece * 16], valid ? src : w.body, valid);
        }
        cp_async_commit();
        if (threadIdx.x < kRows)
#pragma unroll
            for (int j = 0; j < kBlocksPerStep; ++j) {
                const int64_t blk = c * kBlocksPerStep + j;
                scales[j] = blk < n_blocks ? __ldg(reinterpret_cast<const uint16_t*>(w.scales) + my_row * w.blocks_per_row + blk) : 0;
            }
    };
    auto keep_scales = [&](int buf) {
        if (threadIdx.x < kRows)
#pragma unroll
            for (int j = 0; j < kBlocksPerStep; ++j) st[buf].d[threadIdx.x][j] = scales[j];
    };

    float acc[kTokens / 8][4] = {};
    if (c_begin < c_end) {
        stage(c_begin, 0);
        keep_scales(0);
    }
    for (int64_t c = c_begin; c < c_end; ++c) {
        const int buf = static_cast<int>((c - c_begin) & 1);
        if (c + 1 < c_end) {
            stage(c + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const Stage<T>& s = st[buf];
#pragma unroll
        for (int b = 0; b < kBlocksPerStep; ++b) {
            if (c * kBlocksPerStep + b >= n_blocks) break;  // the same for the whole CTA
            uint32_t lo[2][2], hi[2][2];  // rows g and g + 8 of the warp's 16
            const int r0 = warp * 16 + g;
            B::fragment(&s.w[r0][b * B::kBody], s.d[r0][b], tig, lo);
            B::fragment(&s.w[r0 + 8][b * B::kBody], s.d[r0 + 8][b], tig, hi);
            const uint32_t a[2][4] = {{lo[0][0], hi[0][0], lo[0][1], hi[0][1]},
                                      {lo[1][0], hi[1][0], lo[1][1], hi[1][1]}};
#pragma unroll
            for (int nt = 0; nt < kTokens / 8; ++nt) {
                uint32_t bf[4];  // k 0-7, 8-15, 16-23, 24-31 of the block for tokens nt * 8 .. + 7
                ldmatrix_x4(bf, &s.x[nt * 8 + (lane & 7)][b * 32 + (lane >> 3) * 8]);
                mma<__half>(acc[nt], a[0], bf[0], bf[1]);
                mma<__half>(acc[nt], a[1], bf[2], bf[3]);
            }
        }
        if (c + 1 < c_end) keep_scales(buf ^ 1);  // the other stage is not read before the barrier below
        __syncthreads();  // the buffer is staged again two chunks later
    }

    // acc[nt][e]: row row0 + g (+ 8 for e >= 2), token t0 + nt * 8 + 2 tig + (e & 1).
#pragma unroll
    for (int nt = 0; nt < kTokens / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t o = row0 + g + (e >= 2 ? 8 : 0);
            const int t = t0 + nt * 8 + 2 * tig + (e & 1);
            if (o >= n_out || t >= n_tokens) continue;
            if (partial) {
                partial[(static_cast<int64_t>(blockIdx.z) * n_tokens + t) * n_out + o] = acc[nt][e];
            } else {
                float* dst = out + static_cast<int64_t>(t) * n_out + o;
                const float v = acc[nt][e] + (bias ? bias[o] : 0.0f);
                *dst = accumulate ? *dst + v : v;
            }
        }
}

// out[i] (= or +=) sum_s partial[s][i] (s in order) + bias. Launch: one thread per element.
__global__ void sum_slices_kernel(const float* partial, int n_slices, int64_t n, int64_t n_out, const float* bias,
                                  float* out, int accumulate) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    float v = 0.0f;
    for (int s = 0; s < n_slices; ++s) v += partial[s * n + i];
    if (bias) v += bias[i % n_out];
    out[i] = accumulate ? out[i] + v : v;
}

// K slices: enough CTAs for two per SM, each slice at least 4 chunks (512 values), at most 16.
int64_t k_slices(int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms) {
    const int64_t tiles = ceil_div(n_out, kRows) * ceil_div(n_tokens, kTokens);
    const int64_t chunks = ceil_div(n_in, kStep);
    const int64_t want = ceil_div(2LL * std::max(n_sms, 1), tiles);
    return std::clamp<int64_t>(std::min<int64_t>(want, chunks / 4), 1, 16);
}

template <DType T>
void run_tiles(dim3 grid, const TensorView& w, const __half* x, int64_t n_tokens, int64_t chunks_per_slice,
               const float* bias, float* out, int accumulate, float* partial, cudaStream_t stream) {
    constexpr size_t kShared = 2 * sizeof(Stage<T>);
    static const bool configured = [] {
        MVLLM_CUDA_CHECK(cudaFuncSetAttribute(gemm_tiles_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(kShared)));
        return true;
    }();
    (void)configured;
    const int64_t n_in = w.ne[0], n_out = w.ne[1];
    gemm_tiles_kernel<T><<<grid, kWarps * 32, kShared, stream>>>(quant_matrix<T>(w.data, n_in, n_out), x, n_in, n_out,
                                                                 static_cast<int>(n_tokens), chunks_per_slice, bias,
                                                                 out, accumulate, partial);
}

}  // namespace

bool gemm_tiles_supported(DType t) { return t == DType::Q4_0 || t == DType::Q8_0; }

size_t gemm_tiles_scratch_bytes(int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms) {
    const int64_t s = k_slices(n_in, n_out, n_tokens, n_sms);
    return s > 1 ? static_cast<size_t>(s * n_tokens * n_out) * sizeof(float) : 0;
}

void launch_gemm_tiles(const TensorView& w, const TensorView& x, const float* bias, float* out, bool accumulate,
                       void* scratch, int32_t n_sms, cudaStream_t stream) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1], n_tokens = x.ne[1];
    MVLLM_CHECK(gemm_tiles_supported(w.type) && x.type == DType::F16 && x.ne[0] == n_in && n_in % 32 == 0)
        << "gemm_tiles: " << type_name(w.type) << " x " << type_name(x.type);
    if (n_tokens == 0) return;
    const int64_t slices = k_slices(n_in, n_out, n_tokens, n_sms);
    const int64_t chunks_per_slice = ceil_div(ceil_div(n_in, kStep), slices);
    float* partial = slices > 1 ? static_cast<float*>(scratch) : nullptr;
    MVLLM_CHECK(slices == 1 || partial) << "gemm_tiles: split-K scratch missing";
    const dim3 grid(static_cast<unsigned>(ceil_div(n_out, kRows)), static_cast<unsigned>(ceil_div(n_tokens, kTokens)),
                    static_cast<unsigned>(slices));
    const auto* xp = static_cast<const __half*>(x.data);
    const int acc = accumulate ? 1 : 0;
    if (w.type == DType::Q4_0)
        run_tiles<DType::Q4_0>(grid, w, xp, n_tokens, chunks_per_slice, bias, out, acc, partial, stream);
    else
        run_tiles<DType::Q8_0>(grid, w, xp, n_tokens, chunks_per_slice, bias, out, acc, partial, stream);
    MVLLM_CUDA_LAUNCH_CHECK();
    if (partial) {
        const int64_t n = n_tokens * n_out;
        sum_slices_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, stream>>>(
            partial, static_cast<int>(slices), n, n_out, bias, out, acc);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
}

}  // namespace mvllm::cuda
